// The CPU kernel backend: host memory, each call forwarded to its dst::cpu
// kernel. `Scope` is constructed around every call with the kernel's name
// (the default does nothing and compiles away); a test backend uses it to
// open the memory the tensors live in only while a kernel runs, which proves
// that the layers reach their tensors through the backend alone.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/kernels/cpu/activations.h"
#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/embedding.h"
#include "core/kernels/cpu/layernorm.h"
#include "core/kernels/cpu/linear.h"
#include "core/kernels/cpu/loss.h"
#include "core/kernels/cpu/rmsnorm.h"
#include "core/kernels/cpu/rotary.h"
#include "core/kernels/cpu/vector_math.h"
#include "core/kernels/kernels.h"

namespace dst::cpu {

struct NoScope {
  explicit NoScope(const char *) {}
};

// A scope type may say that the host waits for its device's earlier work
// where a value comes back (a loss, a sum of squares) and that this failed:
// the guarded stand-in drains its kept collectives there, as the CUDA backend
// does (Scope::HostWaitReady, then Scope::TakeError says why).
template <typename Scope>
bool HostWaitReady() {
  if constexpr (requires { Scope::HostWaitReady(); }) return Scope::HostWaitReady();
  return true;
}
template <typename Scope>
Status ScopeError() {
  if constexpr (requires { Scope::TakeError(); }) return Scope::TakeError();
  return Status::Ok();
}
static_assert(cpu::kIgnoreIndex == kIgnoredTarget);
inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

template <typename T, typename Scope = NoScope>
class CpuKernels final : public Kernels<T> {
 public:
  const char *name() const override { return "cpu"; }
  Status TakeError() const override { return ScopeError<Scope>(); }

  void Copy(const T *src, int64_t n, T *dst) const override {
    Scope s("Copy");
    std::memcpy(dst, src, size_t(n) * sizeof(T));
  }
  void CopyRows(const T *src, int64_t src_stride, int64_t rows, int64_t width, T *dst,
                int64_t dst_stride) const override {
    Scope s("CopyRows");
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * dst_stride, src + r * src_stride, size_t(width) * sizeof(T));
  }
  void Zero(int64_t n, T *dst) const override {
    Scope s("Zero");
    std::memset(static_cast<void *>(dst), 0, size_t(n) * sizeof(T));
  }
  void FillColumns(T *x, int64_t rows, int64_t width, int64_t begin, T value) const override {
    Scope s("FillColumns");
    for (int64_t r = 0; r < rows; ++r) std::fill(x + r * width + begin, x + (r + 1) * width, value);
  }

  // fp32 through the vectorised conversions; fp64 (gradient checks) one value at a time.
  void RoundTo16(Half half, T *x, int64_t n) const override {
    Scope s("RoundTo16");
    if constexpr (std::is_same_v<T, float>) {
      RoundInPlace(half, x, n);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        float v = float(x[i]);
        uint16_t h;
        FromFloat(half, &v, &h, 1);
        ToFloat(half, &h, &v, 1);
        x[i] = T(v);
      }
    }
  }
  void StashTo16(Half half, T *x, int64_t n, uint16_t *stash) const override {
    Scope s("StashTo16");
    if constexpr (std::is_same_v<T, float>) {
      FromFloatRounding(half, x, stash, n);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        float v = float(x[i]);
        FromFloat(half, &v, stash + i, 1);
        ToFloat(half, stash + i, &v, 1);
        x[i] = T(v);
      }
    }
  }
  void UnstashFrom16(Half half, const uint16_t *stash, int64_t n, T *x) const override {
    Scope s("UnstashFrom16");
    if constexpr (std::is_same_v<T, float>) {
      ToFloat(half, stash, x, n);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        float v;
        ToFloat(half, stash + i, &v, 1);
        x[i] = T(v);
      }
    }
  }

  void Add(const T *a, const T *b, int64_t n, T *out) const override {
    Scope s("Add");
    cpu::Add(a, b, n, out);
  }
  void AddInPlace(const T *x, int64_t n, T *y) const override {
    Scope s("AddInPlace");
    cpu::AddInPlace(x, n, y);
  }
  void AddBiasToRows(const T *bias, int64_t rows, int64_t out, T *y) const override {
    Scope s("AddBiasToRows");
    cpu::AddBiasToRows(bias, rows, out, y);
  }
  void GeluForward(const T *x, int64_t n, T *out) const override {
    Scope s("GeluForward");
    cpu::GeluForward(x, n, out);
  }
  void GeluForwardStashing(const T *x, int64_t n, T *out, uint16_t *out16,
                           uint16_t *x16) const override {
    Scope s("GeluForward");
    if constexpr (std::is_same_v<T, float>)
      cpu::GeluForward(x, n, out, out16, x16);
    else
      (void)out16, (void)x16, cpu::GeluForward(x, n, out);
  }
  void GeluBackward(const T *dout, const T *x, int64_t n, T *dx) const override {
    Scope s("GeluBackward");
    cpu::GeluBackward(dout, x, n, dx);
  }
  void GeluBackwardStashed(const T *dout, const T *x, const uint16_t *x16, int64_t n,
                           T *dx) const override {
    Scope s("GeluBackward");
    if constexpr (std::is_same_v<T, float>)
      cpu::GeluBackward(dout, x, x16, n, dx);
    else
      (void)x16, cpu::GeluBackward(dout, x, n, dx);
  }
  void ReluForward(const T *x, int64_t n, T *out) const override {
    Scope s("ReluForward");
    cpu::ReluForward(x, n, out);
  }
  void ReluBackward(const T *dout, const T *x, int64_t n, T *dx) const override {
    Scope s("ReluBackward");
    cpu::ReluBackward(dout, x, n, dx);
  }

  void LinearForward(const T *x, const T *weight, const T *bias, int64_t rows, int64_t in,
                     int64_t out, T *y, ComputeType compute) const override {
    Scope s("LinearForward");
    cpu::LinearForward(x, weight, bias, rows, in, out, y, compute);
  }
  void LinearBackward(const T *dy, const T *x, const T *weight, int64_t rows, int64_t in,
                      int64_t out, T *dx, T *dweight, T *dbias,
                      ComputeType compute) const override {
    Scope s("LinearBackward");
    cpu::LinearBackward(dy, x, weight, rows, in, out, dx, dweight, dbias, compute);
  }
  void LinearWeightBackward(const T *dy, const T *x, int64_t rows, int64_t in, int64_t out,
                            T *dweight, T *dbias, ComputeType compute) const override {
    Scope s("LinearWeightBackward");
    cpu::LinearWeightBackward(dy, x, rows, in, out, dweight, dbias, compute);
  }
  bool KeepsBf16Copies() const override { return std::is_same_v<T, float>; }
  void LinearForwardStashing(const T *x, uint16_t *x16, const T *weight, const uint16_t *weight16,
                             const T *bias, int64_t rows, int64_t in, int64_t out, T *y,
                             ComputeType compute) const override {
    Scope s("LinearForward");
    cpu::LinearForward(x, weight, bias, rows, in, out, y, compute, x16, weight16);
  }
  void LinearBackwardStashed(const T *dy, const T *x, const uint16_t *x16, const T *weight,
                             const uint16_t *weight16, int64_t rows, int64_t in, int64_t out, T *dx,
                             T *dweight, T *dbias, ComputeType compute) const override {
    Scope s("LinearBackward");
    cpu::LinearBackward(dy, x, weight, rows, in, out, dx, dweight, dbias, compute, x16, weight16);
  }
  void GeluLinearBackwardStashed(T *dout, const T *gx, const uint16_t *gx16, const T *x,
                                 const uint16_t *x16, const T *weight, const uint16_t *weight16,
                                 int64_t rows, int64_t in, int64_t out, T *dx, T *dweight, T *dbias,
                                 ComputeType compute) const override {
    if constexpr (std::is_same_v<T, float>) {
      if (compute == ComputeType::kBf16 && gx16 != nullptr) {
        Scope s("GeluLinearBackward");
        return cpu::GeluLinearBackwardBf16(dout, gx16, x, x16, weight, weight16, rows, in, out, dx,
                                           dweight, dbias);
      }
    }
    Kernels<T>::GeluLinearBackwardStashed(dout, gx, gx16, x, x16, weight, weight16, rows, in, out,
                                          dx, dweight, dbias, compute);
  }
  void LinearWeightBackwardStashed(const T *dy, const T *x, const uint16_t *x16, int64_t rows,
                                   int64_t in, int64_t out, T *dweight, T *dbias,
                                   ComputeType compute) const override {
    Scope s("LinearWeightBackward");
    cpu::LinearWeightBackward(dy, x, rows, in, out, dweight, dbias, compute, x16);
  }

  void LayerNormForward(const T *x, const T *weight, const T *bias, int64_t rows, int64_t C, T *out,
                        T *mean, T *rstd) const override {
    Scope s("LayerNormForward");
    cpu::LayerNormForward(x, weight, bias, rows, C, out, mean, rstd);
  }
  void LayerNormForwardStashing(const T *x, const T *weight, const T *bias, int64_t rows, int64_t C,
                                T *out, uint16_t *out16, T *mean, T *rstd) const override {
    Scope s("LayerNormForward");
    cpu::LayerNormForward(x, weight, bias, rows, C, out, mean, rstd, out16);
  }
  void AddLayerNormForward(const T *a, const T *b, T *res, const T *weight, const T *bias,
                           int64_t rows, int64_t C, T *out, uint16_t *out16, T *mean,
                           T *rstd) const override {
    Scope s("AddLayerNormForward");
    cpu::AddLayerNormForward(a, b, res, weight, bias, rows, C, out, mean, rstd, out16);
  }
  void LayerNormBackward(const T *dout, const T *x, const T *weight, const T *mean, const T *rstd,
                         int64_t rows, int64_t C, T *dx, T *dweight, T *dbias, T *scratch,
                         int max_threads) const override {
    Scope s("LayerNormBackward");
    cpu::LayerNormBackward(dout, x, weight, mean, rstd, rows, C, dx, dweight, dbias, scratch,
                           max_threads);
  }
  void LayerNormParamBackward(const T *dout, const T *x, const T *mean, const T *rstd, int64_t rows,
                              int64_t C, T *dweight, T *dbias, T *scratch,
                              int max_threads) const override {
    Scope s("LayerNormParamBackward");
    cpu::LayerNormParamBackward(dout, x, mean, rstd, rows, C, dweight, dbias, scratch, max_threads);
  }

  void RmsNormForward(const T *x, const T *weight, int64_t rows, int64_t C, double eps, T *out,
                      uint16_t *out16, T *rstd) const override {
    Scope s("RmsNormForward");
    cpu::RmsNormForward(x, weight, rows, C, eps, out, rstd, out16);
  }
  void AddRmsNormForward(const T *a, const T *b, T *res, const T *weight, int64_t rows, int64_t C,
                         double eps, T *out, uint16_t *out16, T *rstd) const override {
    Scope s("AddRmsNormForward");
    cpu::AddRmsNormForward(a, b, res, weight, rows, C, eps, out, rstd, out16);
  }
  void RmsNormBackward(const T *dout, const T *x, const T *weight, const T *rstd, int64_t rows,
                       int64_t C, T *dx, T *dweight, T *scratch, int max_threads) const override {
    Scope s("RmsNormBackward");
    cpu::RmsNormBackward(dout, x, weight, rstd, rows, C, dx, dweight, scratch, max_threads);
  }
  void RmsNormParamBackward(const T *dout, const T *x, const T *rstd, int64_t rows, int64_t C,
                            T *dweight, T *scratch, int max_threads) const override {
    Scope s("RmsNormParamBackward");
    cpu::RmsNormParamBackward(dout, x, rstd, rows, C, dweight, scratch, max_threads);
  }
  void Rotary(T *qkv, const AttentionShape &shape, const math::RopeParams &rope,
              bool inverse) const override {
    Scope s("Rotary");
    cpu::RotaryForward(qkv, shape, rope, inverse);
  }
  void SiluMulForward(const T *gate, const T *up, int64_t n, T *out,
                      uint16_t *out16) const override {
    Scope s("SiluMulForward");
    cpu::SiluMulForward(gate, up, n, out, out16);
  }
  void SiluMulBackward(const T *dout, const T *gate, const T *up, int64_t n, T *dgate,
                       T *dup) const override {
    Scope s("SiluMulBackward");
    cpu::SiluMulBackward(dout, gate, up, n, dgate, dup);
  }

  void AttentionForward(const T *qkv, const AttentionShape &shape, T *att, T *y,
                        ComputeType compute) const override {
    Scope s("AttentionForward");
    cpu::AttentionForward(qkv, shape, att, y, compute);
  }
  void AttentionForwardStashing(const T *qkv, uint16_t *qkv16, const AttentionShape &shape, T *att,
                                uint16_t *att16, T *y, ComputeType compute) const override {
    Scope s("AttentionForward");
    cpu::AttentionForward(qkv, shape, att, y, compute, qkv16, att16);
  }
  void AttentionCached(const T *qkv, const AttentionShape &shape, const KvCacheView<T> &cache, T *y,
                       ComputeType compute) const override {
    Scope s("AttentionCached");
    cpu::AttentionCached(qkv, shape, cache, y, compute);
  }
  void AttentionBackward(const T *dy, const T *qkv, const T *att, const AttentionShape &shape,
                         T *dqkv, T *scratch, ComputeType compute) const override {
    Scope s("AttentionBackward");
    cpu::AttentionBackward(dy, qkv, att, shape, dqkv, scratch, compute);
  }
  void AttentionBackwardStashed(const T *dy, const T *qkv, const uint16_t *qkv16, const T *att,
                                const uint16_t *att16, const AttentionShape &shape, T *dqkv,
                                T *scratch, ComputeType compute) const override {
    Scope s("AttentionBackward");
    cpu::AttentionBackward(dy, qkv, att, shape, dqkv, scratch, compute, qkv16, att16);
  }

  void EmbeddingForward(const int32_t *tokens, const T *wte, const T *wpe, int64_t B, int64_t Tn,
                        int64_t C, T *out) const override {
    Scope s("EmbeddingForward");
    cpu::EmbeddingForward(tokens, wte, wpe, B, Tn, C, out);
  }
  void EmbeddingLookupRange(const int32_t *tokens, const T *wte, int64_t first, int64_t rows,
                            int64_t B, int64_t Tn, int64_t C, T *out) const override {
    Scope s("EmbeddingLookupRange");
    cpu::EmbeddingLookupRange(tokens, wte, first, rows, B, Tn, C, out);
  }
  void AddPositionsToRows(const T *wpe, int64_t first_row, int64_t rows, int64_t Tn, int64_t C,
                          T *out) const override {
    Scope s("AddPositionsToRows");
    cpu::AddPositionsToRows(wpe, first_row, rows, Tn, C, out);
  }
  void EmbeddingBackward(const T *dout, const int32_t *tokens, int64_t B, int64_t Tn, int64_t C,
                         T *dwte, T *dwpe, int64_t first, int64_t rows) const override {
    Scope s("EmbeddingBackward");
    cpu::EmbeddingBackward(dout, tokens, B, Tn, C, dwte, dwpe, first, rows);
  }

  double SoftmaxCrossEntropyForward(T *logits, const int32_t *targets, int64_t rows, int64_t V,
                                    int64_t *counted) const override {
    Scope s("SoftmaxCrossEntropyForward");
    if (!HostWaitReady<Scope>()) return *counted = 0, kNoValue;
    return double(cpu::SoftmaxCrossEntropyForward(logits, targets, rows, V, counted));
  }
  void SoftmaxCrossEntropyForwardInto(T *logits, const int32_t *targets, int64_t rows, int64_t V,
                                      double *loss_sum) const override {
    Scope s("SoftmaxCrossEntropyForwardInto");
    int64_t counted = 0;
    *loss_sum += double(cpu::SoftmaxCrossEntropyForward(logits, targets, rows, V, &counted));
  }
  void SoftmaxCrossEntropyBackward(const T *probs, const int32_t *targets, int64_t rows, int64_t V,
                                   int64_t counted, T grad_scale, T *dlogits,
                                   int64_t first) const override {
    Scope s("SoftmaxCrossEntropyBackward");
    cpu::SoftmaxCrossEntropyBackward(probs, targets, rows, V, counted, grad_scale, dlogits, first);
  }
  void RowMaxima(const T *logits, int64_t rows, int64_t V, T *maxima) const override {
    Scope s("RowMaxima");
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T *row = logits + r * V;
      T m = row[0];
      for (int64_t j = 1; j < V; ++j) m = row[j] > m ? row[j] : m;
      maxima[r] = m;
    }
  }
  void ExpAndSums(T *logits, int64_t rows, int64_t V, const T *maxima, int64_t parts,
                  const int32_t *targets, int64_t first, T *sums, T *target_exp) const override {
    Scope s("ExpAndSums");
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      T m = maxima[r];
      for (int64_t p = 1; p < parts; ++p) m = std::max(m, maxima[p * rows + r]);
      T *row = logits + r * V;
      sums[r] = cpu::ExpShiftedAndSum(row, V, m);  // row holds exp(logit - max) now
      const int64_t t = int64_t(targets[r]) - first;
      target_exp[r] = t >= 0 && t < V ? row[t] : T(0);
    }
  }
  double NormalizeAndNll(T *logits, int64_t rows, int64_t V, const T *sums, const T *target_exp,
                         const int32_t *targets, int64_t *counted) const override {
    Scope s("NormalizeAndNll");
    if (!HostWaitReady<Scope>()) return *counted = 0, kNoValue;
    return NormalizedNll(logits, rows, V, sums, target_exp, targets, counted);
  }
  void NormalizeAndNllInto(T *logits, int64_t rows, int64_t V, const T *sums, const T *target_exp,
                           const int32_t *targets, double *loss_sum) const override {
    Scope s("NormalizeAndNllInto");
    int64_t counted = 0;
    *loss_sum += NormalizedNll(logits, rows, V, sums, target_exp, targets, &counted);
  }
  double MseForward(const T *pred, const T *labels, int64_t n) const override {
    Scope s("MseForward");
    if (!HostWaitReady<Scope>()) return kNoValue;
    return double(cpu::MseForward(pred, labels, n));
  }
  void MseBackward(const T *pred, const T *labels, int64_t n, T grad_scale, T *dpred,
                   int64_t mean_over) const override {
    Scope s("MseBackward");
    cpu::MseBackward(pred, labels, n, grad_scale, dpred, mean_over);
  }

 private:
  // logits /= sums row-wise; the mean of -log(target_exp / sums) over the
  // counted targets.
  static double NormalizedNll(T *logits, int64_t rows, int64_t V, const T *sums,
                              const T *target_exp, const int32_t *targets, int64_t *counted) {
    double nll = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const T inv = T(1) / sums[r];
      T *row = logits + r * V;
      for (int64_t j = 0; j < V; ++j) row[j] *= inv;
      if (targets[r] == kIgnoreIndex) continue;
      const double p = double(target_exp[r] * inv);  // -log p_t, floored as the plain loss is
      nll += -std::log(p > 1e-30 ? p : 1e-30);
      ++n;
    }
    *counted = n;
    return n > 0 ? nll / double(n) : 0.0;
  }
};

}  // namespace dst::cpu
