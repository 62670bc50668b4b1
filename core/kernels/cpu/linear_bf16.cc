// nn.Linear's backward with bf16 GEMMs (linear.h's kBf16 forms).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/kernels/cpu/activations.h"
#include "core/kernels/cpu/gemm.h"
#include "core/kernels/cpu/linear.h"
#include "core/kernels/cpu/vector_math.h"
#include "core/precision/convert.h"

namespace dst::cpu {

namespace {

// The calling thread's bf16 output gradient (grown to the largest seen).
std::vector<uint16_t> &Rounded() {
  thread_local std::vector<uint16_t> rounded;
  return rounded;
}

// dy [rows, out] rounded to bf16 into the calling thread's scratch; with
// dbias, its column sums added there in the same pass (linear.h's
// AddColumnSums order, so the same bits).
const uint16_t *RoundGradient(const float *dy, int64_t rows, int64_t out, float *dbias) {
  std::vector<uint16_t> &rounded = Rounded();
  if (dbias == nullptr) {
    RoundToBf16(dy, rows, out, out, rounded);
    return rounded.data();
  }
  rounded.resize(size_t(rows * out));
  uint16_t *dy16 = rounded.data();
  VisitRowsSummingColumns(rows, out, dbias, [&](int64_t r, float *sums) {
    const float *g = dy + r * out;
    RoundRowToBf16(g, dy16 + r * out, out);
    for (int64_t j = 0; j < out; ++j) sums[j] += g[j];
  });
  return dy16;
}

// RoundGradient of dy = dout * gelu'(gx), computed a row at a time in a
// thread's buffer from gx's bf16 copy (GeluLinearBackwardBf16).
const uint16_t *GeluGradient(const float *dout, const uint16_t *gx16, int64_t rows, int64_t out,
                             float *dbias) {
  std::vector<uint16_t> &rounded = Rounded();
  rounded.resize(size_t(rows * out));
  uint16_t *dy16 = rounded.data();
  GeluGradOfBf16();  // made before the threads start
  VisitRowsSummingColumns(rows, out, dbias, [&](int64_t r, float *sums) {
    thread_local std::vector<float> grad;
    grad.resize(size_t(out));
    GeluGradOf16(dout + r * out, gx16 + r * out, grad.data(), out);
    RoundRowToBf16(grad.data(), dy16 + r * out, out);
    if (sums != nullptr)
      for (int64_t j = 0; j < out; ++j) sums[j] += grad[size_t(j)];
  });
  return dy16;
}

void InputGemm(const uint16_t *dy16, const float *weight, const uint16_t *weight16, int64_t rows,
               int64_t in, int64_t out, float *dx) {
  GemmBf16(false, false, int(rows), int(in), int(out), 1.0f, Bf16Operand(dy16, int(out)),
           WeightOperand(weight, weight16, in), 0.0f, dx, int(in));
}

void WeightGemm(const uint16_t *dy16, const float *x, const uint16_t *x16, int64_t rows, int64_t in,
                int64_t out, float *dweight) {
  GemmBf16(true, false, int(out), int(in), int(rows), 1.0f, Bf16Operand(dy16, int(out)),
           x16 != nullptr ? Bf16Operand(x16, int(in)) : Fp32Operand(x, int(in)), 1.0f, dweight,
           int(in));
}

}  // namespace

void LinearWeightBackwardBf16(const float *dy, const float *x, const uint16_t *x16, int64_t rows,
                              int64_t in, int64_t out, float *dweight, float *dbias) {
  WeightGemm(RoundGradient(dy, rows, out, dbias), x, x16, rows, in, out, dweight);
}

void LinearBackwardBf16(const float *dy, const float *x, const uint16_t *x16, const float *weight,
                        const uint16_t *weight16, int64_t rows, int64_t in, int64_t out, float *dx,
                        float *dweight, float *dbias) {
  const uint16_t *dy16 = RoundGradient(dy, rows, out, dweight != nullptr ? dbias : nullptr);
  if (dx) InputGemm(dy16, weight, weight16, rows, in, out, dx);
  if (dweight) WeightGemm(dy16, x, x16, rows, in, out, dweight);
}

void GeluLinearBackwardBf16(const float *dout, const uint16_t *gx16, const float *x,
                            const uint16_t *x16, const float *weight, const uint16_t *weight16,
                            int64_t rows, int64_t in, int64_t out, float *dx, float *dweight,
                            float *dbias) {
  const uint16_t *dy16 = GeluGradient(dout, gx16, rows, out, dweight != nullptr ? dbias : nullptr);
  if (dx) InputGemm(dy16, weight, weight16, rows, in, out, dx);
  if (dweight) WeightGemm(dy16, x, x16, rows, in, out, dweight);
}

}  // namespace dst::cpu
