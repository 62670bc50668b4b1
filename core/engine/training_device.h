// The GPU a rank trains on (dstrain.device "cuda"): the device LOCAL_RANK
// names, one stream every kernel and copy of the step is queued on, device
// memory for the model's and the optimizer's buffers, and the CUDA kernel
// backend (layers and step). Opened before the engine builds anything; an
// error names why there is none (no plugin, no driver, fewer devices than
// local ranks).
#pragma once

#include <memory>
#include <string>

#include "core/common/status.h"
#include "core/kernels/step_kernels.h"
#include "core/runtime/cuda_kernels.h"
#include "core/runtime/cuda_runtime.h"

namespace dst {

class TrainingDevice {
 public:
  // cuda:`local_rank` (the launcher's LOCAL_RANK).
  static Result<std::unique_ptr<TrainingDevice>> Open(int64_t local_rank);

  const char *name() const { return kernels_->name(); }
  MemoryResource *memory() { return memory_.get(); }
  const CudaKernels &kernels() const { return *kernels_; }
  StepPlacement placement() { return {memory_.get(), kernels_.get()}; }
  // The first allocation or copy that failed, else the first kernel that
  // failed since the last call (OK when none): the engine asks after
  // building and after each step.
  Status TakeStatus() const;

 private:
  TrainingDevice() = default;
  std::unique_ptr<CudaStream> stream_;
  std::unique_ptr<CudaDeviceMemory> memory_;
  std::unique_ptr<CudaKernels> kernels_;
};

}  // namespace dst
