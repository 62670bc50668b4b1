// The CPU step backend: host memory, each call forwarded to its dst::cpu
// kernel (CPU-Adam for Adam/AdamW). `Scope` as in cpu_kernels.h: built
// around every call with its name; the default compiles away.
#pragma once

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
};

}  // namespace dst::cpu
