// The device a rank trains on (dstrain.device "cuda"): the memory the
// model's and the optimizer's buffers live in, the layers' and the step's
// kernel backends, and how its groups' communicators reach that memory.
// Opened before the engine builds anything; an error names why there is
// none. Two kinds:
//   - CUDA: the GPU LOCAL_RANK names, one stream every kernel and copy of the
//     step is queued on, device memory, the CUDA backend (one rank for now:
//     the groups' NCCL communicators are not wired yet);
//   - the guarded stand-in (DSTRAIN_TEST_DEVICE=guarded,
//     core/runtime/guarded_device.h): host memory closed to the host outside
//     the CPU backend's kernels and the collectives, so the device path's
//     host code is checked on any machine, at any data-parallel size.
#pragma once

#include <memory>
#include <string>

#include "core/comm/communicator.h"
#include "core/common/status.h"
#include "core/kernels/kernels.h"
#include "core/kernels/step_kernels.h"
#include "core/runtime/memory.h"

namespace dst {

class TrainingDevice {
 public:
  // cuda:`local_rank` (the launcher's LOCAL_RANK) for a job of `world_size`
  // ranks, or the guarded stand-in when DSTRAIN_TEST_DEVICE=guarded.
  static Result<std::unique_ptr<TrainingDevice>> Open(int64_t local_rank, int64_t world_size);
  virtual ~TrainingDevice() = default;

  virtual const char *name() const = 0;  // "cuda:0", "guarded"
  virtual MemoryResource *memory() = 0;
  virtual const Kernels<float> &kernels() const = 0;
  virtual const StepKernels &step() const = 0;
  StepPlacement placement() { return {memory(), &step()}; }
  // Whether bf16 training multiplies in bf16 here (ComputeType::kBf16: CUDA's
  // bf16 GEMMs with fp32 accumulation; the stand-in follows the CPU's choice).
  virtual bool Bf16Gemms() const = 0;
  // The first allocation or copy that failed, else the first kernel that
  // failed since the last call (OK when none): the engine asks after
  // building and after each step.
  virtual Status TakeStatus() const = 0;
  // A group of the rank's, made able to reach this device's memory.
  virtual std::unique_ptr<Communicator> Adopt(std::unique_ptr<Communicator> group) { return group; }
};

}  // namespace dst
