#include "core/engine/training_device.h"

#include <cstdlib>
#include <string_view>

#include "core/comm/gloo_communicator.h"
#include "core/comm/nccl_communicator.h"
#include "core/comm/routed_communicator.h"
#include "core/kernels/cpu/gemm.h"
#include "core/device/cuda_kernels.h"
#include "core/device/cuda_seam.h"
#include "core/common/test_hooks.h"
#if DSTRAIN_TEST_HOOKS
#include "core/device/guarded_device.h"
#endif

namespace dst {

namespace {

Status In(Status st, const std::string &where) {
  return st.context("dstrain.device \"cuda\": " + where);
}

class CudaTrainingDevice final : public TrainingDevice {
 public:
  static Result<std::unique_ptr<TrainingDevice>> Open(int64_t local_rank) {
    Result<const CudaRuntime *> runtime = CudaRuntime::Get();
    if (!runtime.ok()) return In(runtime.status(), "no CUDA runtime");
    if (local_rank >= runtime.value()->device_count())
      return Status(Code::kNotSupported,
                    "dstrain.device \"cuda\": LOCAL_RANK " + std::to_string(local_rank) +
                        " names cuda:" + std::to_string(local_rank) + ", but this machine has " +
                        std::to_string(runtime.value()->device_count()) +
                        " CUDA device(s); launch at most that many ranks per node");
    Result<CudaStream> stream = CudaStream::Create(*runtime.value(), int(local_rank));
    if (!stream.ok())
      return In(stream.status(), "creating a stream on cuda:" + std::to_string(local_rank));
    std::unique_ptr<CudaTrainingDevice> device(new CudaTrainingDevice());
    device->stream_ = std::make_unique<CudaStream>(std::move(stream).value());
    device->memory_ = std::make_unique<CudaDeviceMemory>(*device->stream_);
    Result<std::unique_ptr<CudaKernels>> kernels =
        CudaKernels::Create(*runtime.value(), *device->stream_);
    if (!kernels.ok()) return In(kernels.status(), "the kernel backend");
    device->kernels_ = std::move(kernels).value();
    device->WaitForCollectivesOnTheStream();
    return std::unique_ptr<TrainingDevice>(std::move(device));
  }

  const char *name() const override { return kernels().name(); }
  MemoryResource *memory() override { return memory_.get(); }
  const Kernels<float> &kernels() const override { return *kernels_; }
  const StepKernels &step() const override { return *kernels_; }
  bool Bf16Gemms() const override { return true; }
  Status TakeStatus() const override {
    Status works = DrainWorks();
    if (!memory_->status().ok()) return memory_->status();
    Status kernel = kernels_->TakeError();
    return kernel.ok() ? works : kernel;
  }

 protected:
  bool Holds(const void *p) const override { return memory_->Owns(p); }
  // NCCL on the current device (the stream's), each operation ordered after
  // the work queued on the stream before it.
  Result<std::unique_ptr<Communicator>> ConnectTwin(Store &store,
                                                    const GlooOptions &options) override {
    NcclOptions nccl = options;
    nccl.name = "nccl:" + options.store_prefix;
    Result<std::unique_ptr<Communicator>> comm = CreateNcclCommunicator(store, nccl);
    if (!comm.ok()) return comm.status();
    DST_RETURN_IF_ERROR(comm.value()->OrderAfter(stream_->handle()));
    return comm;
  }

 private:
  CudaTrainingDevice() = default;
  // The compute stream waits on each kept collective's event; every host
  // wait for the stream (a copy back, a loss, a norm) drains them first.
  void WaitForCollectivesOnTheStream() {
    CudaStream *stream = stream_.get();
    order_ =
        std::make_unique<WorkOrder>([stream](void *event) { return stream->WaitEvent(event); });
    WorkOrder *order = order_.get();
    stream_->SetBeforeHostWait([order] { return order->Drain(); });
    kernels_->SetBeforeHostWait([order] { return order->Drain(); });
  }
  std::unique_ptr<CudaStream> stream_;
  std::unique_ptr<CudaDeviceMemory> memory_;
  std::unique_ptr<CudaKernels> kernels_;
};

#if DSTRAIN_TEST_HOOKS
class GuardedTrainingDevice final : public TrainingDevice {
 public:
  // The stand-in's stream: its next kernel or copy waits for the collective.
  GuardedTrainingDevice() {
    order_ = std::make_unique<WorkOrder>([](void *event) {
      guarded::Region::Get().WaitBeforeNextKernel(static_cast<Work *>(event));
      return Status::Ok();
    });
    // A kernel returning a value waits for the "stream": the kept collectives first.
    guarded::Region::Get().SetBeforeHostWait([this] { return DrainWorks(); });
  }
  ~GuardedTrainingDevice() override { guarded::Region::Get().SetBeforeHostWait(nullptr); }
  const char *name() const override { return "guarded"; }
  MemoryResource *memory() override { return &memory_; }
  const Kernels<float> &kernels() const override { return kernels_; }
  const StepKernels &step() const override { return step_; }
  bool Bf16Gemms() const override { return cpu::Bf16Compute().enabled; }
  Status TakeStatus() const override {
    Status works = DrainWorks();
    Status kept = guarded::Region::Get().TakeError();  // a drain a kernel ran
    return kept.ok() ? works : kept;
  }

 protected:
  bool Holds(const void *p) const override { return guarded::Region::Get().Holds(p); }
  // A second Gloo group of the same members whose every operation must be
  // over the region (a host buffer routed here is an error) and opens it.
  Result<std::unique_ptr<Communicator>> ConnectTwin(Store &store,
                                                    const GlooOptions &options) override {
    GlooOptions twin = options;
    twin.store_prefix += "/device";
    Result<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(store, twin);
    if (!comm.ok()) return comm.status();
    return std::unique_ptr<Communicator>(
        std::make_unique<guarded::Communicator>(std::move(comm).value()));
  }

 private:
  guarded::Memory memory_;
  guarded::Kernels kernels_;
  guarded::StepKernels step_;
};
#endif  // DSTRAIN_TEST_HOOKS

}  // namespace

Status TrainingDevice::AdoptGroups(ProcessGroups *groups, Store *store, int64_t rank,
                                   const GlooOptions &common) {
  for (const GroupSlot &slot : GroupSlots(groups)) {
    if (slot.members->size() == 1) continue;  // a solo group moves no data
    Result<std::unique_ptr<Communicator>> twin =
        ConnectTwin(*store, GroupOptions(rank, slot.name, *slot.members, common));
    if (!twin.ok()) {
      Status st = twin.status();
      return st.context(std::string("dstrain.device \"cuda\": the ") + slot.name +
                        " group's device communicator");
    }
    *slot.comm = std::make_unique<RoutedCommunicator>(
        std::move(*slot.comm), std::move(twin).value(), [this](const void *p) { return Holds(p); });
  }
  return Status::Ok();
}

Result<std::unique_ptr<TrainingDevice>> TrainingDevice::Open(int64_t local_rank) {
#if DSTRAIN_TEST_HOOKS
  const char *standin = std::getenv("DSTRAIN_TEST_DEVICE");
  if (standin != nullptr && std::string_view(standin) == "guarded")
    return std::unique_ptr<TrainingDevice>(new GuardedTrainingDevice());
  if (standin != nullptr && *standin != '\0')
    return InvalidArgument("DSTRAIN_TEST_DEVICE=\"" + std::string(standin) +
                           "\": the only stand-in device is \"guarded\" (or unset it)");
#endif
  return CudaTrainingDevice::Open(local_rank);
}

}  // namespace dst
