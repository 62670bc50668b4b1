// The step backend: what the data-parallel layer and the optimizer compute
// on the flat fp32 parameter, gradient and optimizer-state ranges between the
// last backward and the next forward — zeroing and averaging the gradients,
// their norm (which is also the fp16 overflow check: a non-finite norm), the
// fused Adam/AdamW and SGD updates, copies between ranges. It is the second
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
#include "core/kernels/cpu/optimizers.h"
#include "core/runtime/memory.h"

namespace dst {

// The update rules' parameters, shared with CPU-Adam: torch.optim's Adam/AdamW
// (step 1-based) and SGD with momentum, over one flat range.
using AdamHyper = cpu::AdamHyper;
using SgdHyper = cpu::SgdHyper;
// param, grad, exp_avg, exp_avg_sq [n]; grad_mul applied to the gradient
// first; half_out (or null): the updated weights' 16-bit copy.
using AdamRange = cpu::CpuAdamRange;

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
  // One SGD update of param [n] (momentum [n], or null without momentum).
  virtual void SgdUpdate(const float *grad, int64_t n, const SgdHyper &h, float *param,
                         float *momentum) const = 0;
};

// The CPU backend (cpu/cpu_step_kernels.h).
const StepKernels &HostStepKernels();

// Where a training step's flat ranges live and what computes on them: the
// memory their buffers come from (null: the host's) and the step backend
// (null: the CPU's). Both outlive whoever holds the placement.
struct StepPlacement {
  MemoryResource *memory = nullptr;
  const StepKernels *kernels = nullptr;
  const StepKernels &step() const { return kernels ? *kernels : HostStepKernels(); }
  bool on_host() const { return memory == nullptr; }
};

}  // namespace dst
