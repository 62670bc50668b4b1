// The CPU step backend: host memory, each call forwarded to its dst::cpu
// kernel (CPU-Adam for Adam/AdamW). `Scope` as in cpu_kernels.h: built
// around every call with its name; the default compiles away.
#pragma once

#include <algorithm>
#include <cstring>

#include "core/kernels/cpu/cpu_adam.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/optimizers.h"
#include "core/kernels/cpu/reduce.h"
#include "core/kernels/step_kernels.h"

namespace dst::cpu {

template <typename Scope = NoScope>
class CpuStepKernels final : public StepKernels {
 public:
  const char *name() const override { return "cpu"; }
  Status TakeError() const override { return ScopeError<Scope>(); }

  void ZeroRange(int64_t n, float *x) const override {
    Scope s("ZeroRange");
    std::memset(x, 0, size_t(n) * sizeof(float));
  }
  void CopyRange(const float *src, int64_t n, float *dst) const override {
    Scope s("CopyRange");
    std::memcpy(dst, src, size_t(n) * sizeof(float));
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
    std::memcpy(dst, src, bytes);
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
