// The step backend: what the data-parallel layer, its partitions and the
// optimizer compute on the flat parameter, gradient and optimizer-state
// ranges outside the layers — zeroing, accumulating and averaging the
// gradients, their norm (which is also the fp16 overflow check: a non-finite
// norm), the fused Adam/AdamW and SGD updates, copies between ranges, and the
// conversions between fp32 and a 16-bit storage type (bf16, fp16: rounded to
// nearest even, as core/precision/half_ops.h). It is the second
// half of the device seam (kernels.h is the layers'): the pointers live where
// the backend computes, so DataParallel and Optimizer never read or write a
// parameter, gradient or state element themselves. The CPU backend
// (cpu/cpu_step_kernels.h) forwards to the dst::cpu kernels and CPU-Adam.
//
// Conventions as in kernels.h: inputs first, then sizes, then outputs.
#pragma once

#include <cstdint>

#include "core/common/status.h"
#include "core/kernels/cpu/cpu_adam.h"
#include "core/kernels/cpu/cpu_lamb.h"
#include "core/kernels/cpu/optimizers.h"
#include "core/precision/half_ops.h"
#include "core/runtime/memory.h"

namespace dst {

class WorkOrder;  // core/comm/work_order.h

// The update rules' parameters, shared with CPU-Adam: torch.optim's Adam/AdamW
// (step 1-based) and SGD with momentum, over one flat range.
using AdamHyper = cpu::AdamHyper;
using SgdHyper = cpu::SgdHyper;
// param, grad, exp_avg, exp_avg_sq [n]; grad_mul applied to the gradient
// first; half_out (or null): the updated weights' 16-bit copy.
using AdamRange = cpu::CpuAdamRange;
// Lamb (DeepSpeed's FusedLamb) in two passes over each tensor: cpu_lamb.h.
using LambHyper = cpu::LambHyper;
using LambRange = cpu::LambRange;
using LambSums = cpu::LambSums;

class StepKernels {
 public:
  virtual ~StepKernels() = default;
  // Where the ranges live ("cpu", "cuda:0").
  virtual const char *name() const = 0;
  // The first failure since the last call, then cleared (as Kernels).
  virtual Status TakeError() const { return Status::Ok(); }

  virtual void ZeroRange(int64_t n, float *x) const = 0;
  virtual void CopyRange(const float *src, int64_t n, float *dst) const = 0;
  // x *= k.
  virtual void ScaleRange(float k, int64_t n, float *x) const = 0;
  // sum x[i]^2 in double, on the host when it returns (a device backend
  // waits for it; NaN when a kernel failed — TakeError says why).
  virtual double SumOfSquaresRange(const float *x, int64_t n) const = 0;
  // One Adam/AdamW update of the range (AdamW when h.decoupled).
  virtual void AdamUpdate(const AdamRange &r, const AdamHyper &h) const = 0;
  // 1-bit Adam's compressed phase (cpu_adam.h): the momentum alone from the
  // gradient, then the weights from the exchanged momentum and the frozen
  // variance (half_out written).
  virtual void AdamMomentum(const AdamRange &r, const AdamHyper &h) const = 0;
  virtual void AdamApply(const AdamRange &r, const AdamHyper &h) const = 0;
  // 0/1 Adam's element passes over a range and its accumulator (cpu_adam.h).
  virtual void ZeroOneUpdate(const AdamRange &r, const AdamHyper &h, cpu::ZeroOnePhase phase,
                             float *acc, float lrs) const = 0;
  // Lamb's two passes over a range of one tensor: the moments (returns the
  // range's sums of w^2 and u^2), then the weights moved with the whole
  // tensor's trust ratio.
  virtual LambSums LambMoments(const LambRange &r, const LambHyper &h) const = 0;
  virtual void LambApply(const LambRange &r, const LambHyper &h, float trust) const = 0;
  // 1-bit LAMB after its warm-up, one whole tensor a call (cpu_lamb.h).
  virtual void OneBitLambMomentum(const LambRange &r, const LambHyper &h, float scaling,
                                  float *m_last) const = 0;
  virtual cpu::OneBitLambPartial OneBitLambStats(const LambRange &r, const LambHyper &h,
                                                 const float *m_last, float *v_fresh,
                                                 float scaling) const = 0;
  virtual void OneBitLambFinish(const LambRange &r, const LambHyper &h, float scale) const = 0;
  // One SGD update of param [n] (momentum [n], or null without momentum).
  virtual void SgdUpdate(const float *grad, int64_t n, const SgdHyper &h, float *param,
                         float *momentum) const = 0;

  // acc += add.
  virtual void AddRange(const float *add, int64_t n, float *acc) const = 0;
  virtual void CopyBytes(const void *src, size_t bytes, void *dst) const = 0;
  // 16-bit storage: dst = float(src); dst = src rounded; acc = round(acc +
  // add); acc += float(add); acc = round(acc + add) (both 16-bit); the sum of
  // squares in double (as SumOfSquaresRange).
  virtual void Widen16(Half h, const uint16_t *src, int64_t n, float *dst) const = 0;
  virtual void Narrow16(Half h, const float *src, int64_t n, uint16_t *dst) const = 0;
  virtual void AddInto16(Half h, const float *add, int64_t n, uint16_t *acc) const = 0;
  virtual void AddWide16(Half h, const uint16_t *add, int64_t n, float *acc) const = 0;
  virtual void Sum16(Half h, const uint16_t *add, int64_t n, uint16_t *acc) const = 0;
  virtual double SumOfSquares16(Half h, const uint16_t *x, int64_t n) const = 0;
};

// The CPU backend (cpu/cpu_step_kernels.h).
const StepKernels &HostStepKernels();

// Where a training step's flat ranges live and what computes on them: the
// memory their buffers come from (null: the host's) and the step backend
// (null: the CPU's). Both outlive whoever holds the placement.
struct StepPlacement {
  MemoryResource *memory = nullptr;
  const StepKernels *kernels = nullptr;
  // How later kernels wait for a collective over this memory (a device's
  // stream, core/comm/work_order.h); null: the host waits.
  WorkOrder *order = nullptr;
  const StepKernels &step() const { return kernels ? *kernels : HostStepKernels(); }
  bool on_host() const { return memory == nullptr; }
};

}  // namespace dst
