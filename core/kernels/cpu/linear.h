// Fully connected layer, nn.Linear convention: y = x W^T + b with
// W [out, in] row-major. `compute`: what the GEMMs multiply in (ComputeType).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/kernels/cpu/gemm.h"

namespace dst::cpu {

// A weight [out, in] as a bf16 GEMM reads it: its bf16 copy where the caller
// has one, else the fp32 values (rounded per GEMM).
inline GemmOperand WeightOperand(const float *weight, const uint16_t *weight16, int64_t in) {
  return weight16 != nullptr ? Bf16Operand(weight16, int(in)) : Fp32Operand(weight, int(in));
}

// x: [rows, in]; weight: [out, in]; bias: [out] or null; y: [rows, out] (assigns).
// x16: where bf16 compute leaves x rounded to bf16 [rows, in] (the operand
// its GEMM reads; a 16-bit activation stash), or null (per-thread scratch).
// x may be null under bf16 compute when x16 is given: x16 already holds the
// operand (a producer that wrote only the bf16 copy).
// weight16: the weight's bf16 copy [out, in] (the same values, e.g. the
// 16-bit parameter staging), which bf16 compute reads instead of rounding
// the weight again; or null.
template <typename T>
void LinearForward(const T *x, const T *weight, const T *bias, int64_t rows, int64_t in,
                   int64_t out, T *y, ComputeType compute = ComputeType::kFp32,
                   uint16_t *x16 = nullptr, const uint16_t *weight16 = nullptr) {
  if constexpr (std::is_same_v<T, float>) {
    if (compute == ComputeType::kBf16 && (bias || x16 || weight16)) {
      if (x16 && x) RoundToBf16(x, rows, in, in, x16);
      const GemmOperand a = x16 ? Bf16Operand(x16, int(in)) : Fp32Operand(x, int(in));
      const GemmOperand w = WeightOperand(weight, weight16, in);
      if (bias)
        return GemmBf16Bias(false, true, int(rows), int(out), int(in), a, w, bias, y, int(out));
      return GemmBf16(false, true, int(rows), int(out), int(in), 1.0f, a, w, 0.0f, y, int(out));
    }
  }
  (void)x16, (void)weight16;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) std::copy(bias, bias + out, y + r * out);
  }
  Gemm(compute, false, true, int(rows), int(out), int(in), T(1), x, int(in), weight, int(in),
       bias ? T(1) : T(0), y, int(out));
}

// y[r, :] += bias for every row r of y [rows, out] (a row-parallel layer's
// bias, added once after its partial outputs are summed).
template <typename T>
void AddBiasToRows(const T *bias, int64_t rows, int64_t out, T *y) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j) y[r * out + j] += bias[j];
}

// Column sums over the rows are added in fixed blocks of kSumRows rows: each
// block's sums over its rows in order, then the blocks' sums added into the
// total in block order. The bits depend on neither the threads nor a split
// of the columns (tensor parallelism), and a thread walks whole rows of its
// blocks, one contiguous stream. (Splitting the columns between threads
// instead, each reading 3 KB pieces a row apart, ran slower on this
// machine's two cores than on one: a sum over the bench's [2048, 1536]
// gradient 0.25 ms on one thread, 0.57 on two.)
inline constexpr int64_t kSumRows = 64;

// Calls visit(r, sums) for every row r of a [rows, out] matrix, in parallel
// over blocks of kSumRows rows; sums [out] is the row's block's column sums
// (zero before its first row), to which visit adds the row's values, or null
// when dbias is null. Then dbias[j] += the blocks' sums, in block order.
template <typename T, typename Visit>
void VisitRowsSummingColumns(int64_t rows, int64_t out, T *dbias, Visit visit) {
  const int64_t blocks = (rows + kSumRows - 1) / kSumRows;
  thread_local std::vector<T> block_sums;  // the calling thread's [blocks, out]
  if (dbias != nullptr) block_sums.assign(size_t(blocks * out), T(0));
  T *sums = dbias != nullptr ? block_sums.data() : nullptr;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    T *block = sums != nullptr ? sums + b * out : nullptr;
    for (int64_t r = b * kSumRows; r < std::min(rows, (b + 1) * kSumRows); ++r) visit(r, block);
  }
  if (dbias == nullptr) return;
  for (int64_t b = 0; b < blocks; ++b) {
    const T *block = sums + b * out;
    for (int64_t j = 0; j < out; ++j) dbias[j] += block[j];
  }
}

// dbias[j] += the sum over rows of dy[r, j] [rows, out], in VisitRowsSummingColumns' order.
template <typename T>
void AddColumnSums(const T *dy, int64_t rows, int64_t out, T *dbias) {
  VisitRowsSummingColumns(rows, out, dbias, [&](int64_t r, T *sums) {
    const T *g = dy + r * out;
    for (int64_t j = 0; j < out; ++j) sums[j] += g[j];
  });
}

// bf16 compute (linear_bf16.cc): dy rounded to bf16 once, in the pass that
// sums its columns into dbias, and read by both GEMMs; the same bits as the
// generic forms below with ComputeType::kBf16, which round per GEMM.
// x16, weight16: x's and the weight's bf16 copies where the caller has them
// (the same values), or null.
void LinearWeightBackwardBf16(const float *dy, const float *x, const uint16_t *x16, int64_t rows,
                              int64_t in, int64_t out, float *dweight, float *dbias);
void LinearBackwardBf16(const float *dy, const float *x, const uint16_t *x16, const float *weight,
                        const uint16_t *weight16, int64_t rows, int64_t in, int64_t out, float *dx,
                        float *dweight, float *dbias);
// A GELU's backward feeding LinearBackwardBf16 (the MLP's first linear):
// dy = dout * gelu'(gx) [rows, out] from the GELU input's bf16 copy gx16,
// rounded to bf16 in the pass that sums its columns into dbias, so dy is
// never written in fp32 (dout is only read). The same bits as GeluBackward
// then LinearBackwardBf16 where out is a multiple of 16 (else each row's
// last values take GELU's scalar loop: equal to fp32 roundoff).
void GeluLinearBackwardBf16(const float *dout, const uint16_t *gx16, const float *x,
                            const uint16_t *x16, const float *weight, const uint16_t *weight16,
                            int64_t rows, int64_t in, int64_t out, float *dx, float *dweight,
                            float *dbias);

// dweight (+=): [out, in] = dy^T x; dbias (+=, if non-null): [out] = column
// sums of dy. The weight half of LinearBackward (zero-bubble schedules run it
// later than the input half).
template <typename T>
void LinearWeightBackward(const T *dy, const T *x, int64_t rows, int64_t in, int64_t out,
                          T *dweight, T *dbias, ComputeType compute = ComputeType::kFp32,
                          const uint16_t *x16 = nullptr) {
  if constexpr (std::is_same_v<T, float>)
    if (compute == ComputeType::kBf16)
      return LinearWeightBackwardBf16(dy, x, x16, rows, in, out, dweight, dbias);
  (void)x16;
  Gemm(compute, true, false, int(out), int(in), int(rows), T(1), dy, int(out), x, int(in), T(1),
       dweight, int(in));
  if (dbias) AddColumnSums(dy, rows, out, dbias);
}

// dx (assigns, if non-null): [rows, in] = dy W; then, if dweight is non-null,
// LinearWeightBackward (dweight, dbias +=).
template <typename T>
void LinearBackward(const T *dy, const T *x, const T *weight, int64_t rows, int64_t in, int64_t out,
                    T *dx, T *dweight, T *dbias, ComputeType compute = ComputeType::kFp32,
                    const uint16_t *x16 = nullptr, const uint16_t *weight16 = nullptr) {
  if constexpr (std::is_same_v<T, float>)
    if (compute == ComputeType::kBf16)
      return LinearBackwardBf16(dy, x, x16, weight, weight16, rows, in, out, dx, dweight, dbias);
  (void)x16, (void)weight16;
  if (dx)
    Gemm(compute, false, false, int(rows), int(in), int(out), T(1), dy, int(out), weight, int(in),
         T(0), dx, int(in));
  if (dweight) LinearWeightBackward(dy, x, rows, in, out, dweight, dbias, compute);
}

}  // namespace dst::cpu
