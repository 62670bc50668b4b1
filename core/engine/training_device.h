// The device a rank trains on (dstrain.device "cuda"): the memory the
// model's and the optimizer's buffers live in, the layers' and the step's
// kernel backends, and how its groups' communicators reach that memory.
// Opened before the engine builds anything; an error names why there is
// none. Two kinds:
//   - CUDA: the GPU LOCAL_RANK names, one stream every kernel and copy of the
//     step is queued on, device memory, the CUDA backend; each group of more
//     than one rank gains an NCCL twin for its collectives over device
//     memory (ordered after the stream's work), Gloo keeping the host ones;
//   - the guarded stand-in (DSTRAIN_TEST_DEVICE=guarded,
//     core/device/guarded_device.h): host memory closed to the host outside
//     the CPU backend's kernels and the collectives, so the device path's
//     host code is checked on any machine, at any data-parallel size.
#pragma once

#include <memory>
#include <string>

#include "core/comm/communicator.h"
#include "core/comm/process_groups.h"
#include "core/comm/store.h"
#include "core/comm/work_order.h"
#include "core/common/status.h"
#include "core/kernels/kernels.h"
#include "core/kernels/step_kernels.h"
#include "core/runtime/memory.h"

namespace dst {

class TrainingDevice {
 public:
  // cuda:`local_rank` (the launcher's LOCAL_RANK), or the guarded stand-in
  // when DSTRAIN_TEST_DEVICE=guarded.
  static Result<std::unique_ptr<TrainingDevice>> Open(int64_t local_rank);
  virtual ~TrainingDevice() = default;

  virtual const char *name() const = 0;  // "cuda:0", "guarded"
  virtual MemoryResource *memory() = 0;
  virtual const Kernels<float> &kernels() const = 0;
  virtual const StepKernels &step() const = 0;
  StepPlacement placement() { return {memory(), &step(), work_order()}; }
  // Whether bf16 training multiplies in bf16 here (ComputeType::kBf16: CUDA's
  // bf16 GEMMs with fp32 accumulation; the stand-in follows the CPU's choice).
  virtual bool Bf16Gemms() const = 0;
  // The first allocation or copy that failed, else the first kernel that
  // failed since the last call, else the first collective the work order
  // kept that failed (waiting for them all; OK when none): the engine asks
  // after building and after each step, failed or not.
  virtual Status TakeStatus() const = 0;
  // How the layers' kernels wait for the device group's collectives: the
  // compute stream waits on each one's completion event and the host goes
  // on; drained by TakeStatus and before any host wait for the stream.
  WorkOrder *work_order() { return order_.get(); }
  // Every group of more than one rank becomes a RoutedCommunicator: its
  // host (Gloo) group for host memory, a device twin (ConnectTwin) for this
  // device's memory; except the pipeline's point-to-point group, whose
  // messages travel in host buffers (StageLink says why). `rank` is the global rank, `common` the
  // options the groups connected with.
  Status AdoptGroups(ProcessGroups *groups, Store *store, int64_t rank, const GlooOptions &common);

 protected:
  // Whether `p` points into this device's memory.
  virtual bool Holds(const void *p) const = 0;
  // The device's communicator for the group `options` describes.
  virtual Result<std::unique_ptr<Communicator>> ConnectTwin(Store &store,
                                                            const GlooOptions &options) = 0;
  // The first failure among the kept collectives, waiting for them all.
  Status DrainWorks() const { return order_ ? order_->Drain() : Status::Ok(); }

  std::unique_ptr<WorkOrder> order_;
};

}  // namespace dst
