// The CPU step backend: host memory, each call forwarded to its dst::cpu
// kernel (CPU-Adam for Adam/AdamW). `Scope` as in cpu_kernels.h: built
// around every call with its name; the default compiles away.
#pragma once

#include <algorithm>
#include <cstring>

#include "core/kernels/cpu/cpu_adam.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/cpu_lamb.h"
#include "core/kernels/cpu/optimizers.h"
#include "core/kernels/cpu/reduce.h"
#include "core/kernels/step_kernels.h"

namespace dst::cpu {

// f(at, bytes) over [0, total) in contiguous 1 MiB pieces split over the
// OpenMP threads; a smaller range in one call. (A serial memcpy of a layer's
// 16-bit parameters, and the gradients' memset, were the step's unscaled
// part on two threads.)
template <typename F>
void InPieces(size_t total, F f) {
  constexpr size_t kPiece = size_t(1) << 20;
  if (total < 2 * kPiece) {
    if (total > 0) f(0, total);
    return;
  }
  const int64_t pieces = int64_t((total + kPiece - 1) / kPiece);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < pieces; ++p) {
    const size_t at = size_t(p) * kPiece;
    f(at, std::min(kPiece, total - at));
  }
}

inline void CopyInPieces(const void *src, size_t bytes, void *dst) {
  InPieces(bytes, [&](size_t at, size_t n) {
    std::memcpy(static_cast<char *>(dst) + at, static_cast<const char *>(src) + at, n);
  });
}

template <typename Scope = NoScope>
class CpuStepKernels final : public StepKernels {
 public:
  const char *name() const override { return "cpu"; }
  Status TakeError() const override { return ScopeError<Scope>(); }

  void ZeroRange(int64_t n, float *x) const override {
    Scope s("ZeroRange");
    InPieces(size_t(n) * sizeof(float), [&](size_t at, size_t bytes) {
      std::memset(reinterpret_cast<char *>(x) + at, 0, bytes);
    });
  }
  void CopyRange(const float *src, int64_t n, float *dst) const override {
    Scope s("CopyRange");
    CopyInPieces(src, size_t(n) * sizeof(float), dst);
  }
  void ScaleRange(float k, int64_t n, float *x) const override {
    Scope s("ScaleRange");
    Scale(x, n, k);
  }
  double SumOfSquaresRange(const float *x, int64_t n) const override {
    Scope s("SumOfSquaresRange");
    if (!HostWaitReady<Scope>()) return kNoValue;
    return SumOfSquares(x, n);
  }
  void AdamUpdate(const AdamRange &r, const AdamHyper &h) const override {
    Scope s("AdamUpdate");
    CpuAdamStep(r, h);
  }
  void AdamMomentum(const AdamRange &r, const AdamHyper &h) const override {
    Scope s("AdamMomentum");
    CpuAdamMomentum(r, h);
  }
  void AdamApply(const AdamRange &r, const AdamHyper &h) const override {
    Scope s("AdamApply");
    CpuAdamApply(r, h);
  }
  void ZeroOneUpdate(const AdamRange &r, const AdamHyper &h, ZeroOnePhase phase, float *acc,
                     float lrs) const override {
    Scope s("ZeroOneUpdate");
    CpuZeroOneUpdate(r, h, phase, acc, lrs);
  }
  LambSums LambMoments(const LambRange &r, const LambHyper &h) const override {
    Scope s("LambMoments");
    return cpu::LambMoments(r, h);
  }
  void OneBitLambMomentum(const LambRange &r, const LambHyper &h, float scaling,
                          float *m_last) const override {
    Scope s("OneBitLambMomentum");
    cpu::OneBitLambMomentum(r, h, scaling, m_last);
  }
  OneBitLambPartial OneBitLambStats(const LambRange &r, const LambHyper &h, const float *m_last,
                                    float *v_fresh, float scaling) const override {
    Scope s("OneBitLambStats");
    return cpu::OneBitLambStats(r, h, m_last, v_fresh, scaling);
  }
  void OneBitLambFinish(const LambRange &r, const LambHyper &h, float scale) const override {
    Scope s("OneBitLambFinish");
    cpu::OneBitLambFinish(r, h, scale);
  }
  void LambApply(const LambRange &r, const LambHyper &h, float trust) const override {
    Scope s("LambApply");
    cpu::LambApply(r, h, trust);
  }
  void SgdUpdate(const float *grad, int64_t n, const SgdHyper &h, float *param,
                 float *momentum) const override {
    Scope s("SgdUpdate");
    cpu::SgdUpdate(param, grad, momentum, n, h);
  }

  void AddRange(const float *add, int64_t n, float *acc) const override {
    Scope s("AddRange");
    for (int64_t i = 0; i < n; ++i) acc[i] += add[i];
  }
  void CopyBytes(const void *src, size_t bytes, void *dst) const override {
    Scope s("CopyBytes");
    CopyInPieces(src, bytes, dst);
  }
  void Widen16(Half h, const uint16_t *src, int64_t n, float *dst) const override {
    Scope s("Widen16");
    ToFloat(h, src, dst, n);
  }
  void Narrow16(Half h, const float *src, int64_t n, uint16_t *dst) const override {
    Scope s("Narrow16");
    FromFloat(h, src, dst, n);
  }
  void AddInto16(Half h, const float *add, int64_t n, uint16_t *acc) const override {
    Scope s("AddInto16");
    AccumulateInto(h, add, acc, n);
  }
  void AddWide16(Half h, const uint16_t *add, int64_t n, float *acc) const override {
    Scope s("AddWide16");
    constexpr int64_t kChunk = 4096;
    float wide[kChunk];
    for (int64_t c = 0; c < n; c += kChunk) {
      const int64_t m = std::min(kChunk, n - c);
      ToFloat(h, add + c, wide, m);
      for (int64_t i = 0; i < m; ++i) acc[c + i] += wide[i];
    }
  }
  void Sum16(Half h, const uint16_t *add, int64_t n, uint16_t *acc) const override {
    Scope s("Sum16");
    dst::Sum16(h, acc, add, n);
  }
  double SumOfSquares16(Half h, const uint16_t *x, int64_t n) const override {
    Scope s("SumOfSquares16");
    if (!HostWaitReady<Scope>()) return kNoValue;
    return dst::SumOfSquares16(h, x, n);
  }
};

}  // namespace dst::cpu
