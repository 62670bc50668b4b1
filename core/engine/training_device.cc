#include "core/engine/training_device.h"

#include <cstdlib>
#include <string_view>

#include "core/kernels/cpu/gemm.h"
#include "core/runtime/cuda_kernels.h"
#include "core/runtime/cuda_runtime.h"
#include "core/runtime/guarded_device.h"

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
    return std::unique_ptr<TrainingDevice>(std::move(device));
  }

  const char *name() const override { return kernels().name(); }
  MemoryResource *memory() override { return memory_.get(); }
  const Kernels<float> &kernels() const override { return *kernels_; }
  const StepKernels &step() const override { return *kernels_; }
  bool Bf16Gemms() const override { return true; }
  Status TakeStatus() const override {
    if (!memory_->status().ok()) return memory_->status();
    return kernels().TakeError();
  }

 private:
  CudaTrainingDevice() = default;
  std::unique_ptr<CudaStream> stream_;
  std::unique_ptr<CudaDeviceMemory> memory_;
  std::unique_ptr<CudaKernels> kernels_;
};

class GuardedTrainingDevice final : public TrainingDevice {
 public:
  const char *name() const override { return "guarded"; }
  MemoryResource *memory() override { return &memory_; }
  const Kernels<float> &kernels() const override { return kernels_; }
  const StepKernels &step() const override { return step_; }
  bool Bf16Gemms() const override { return cpu::Bf16Compute().enabled; }
  Status TakeStatus() const override { return Status::Ok(); }
  std::unique_ptr<Communicator> Adopt(std::unique_ptr<Communicator> group) override {
    return std::make_unique<guarded::Communicator>(std::move(group));
  }

 private:
  guarded::Memory memory_;
  guarded::Kernels kernels_;
  guarded::StepKernels step_;
};

}  // namespace

Result<std::unique_ptr<TrainingDevice>> TrainingDevice::Open(int64_t local_rank,
                                                             int64_t world_size) {
  const char *standin = std::getenv("DSTRAIN_TEST_DEVICE");
  if (standin != nullptr && std::string_view(standin) == "guarded")
    return std::unique_ptr<TrainingDevice>(new GuardedTrainingDevice());
  if (standin != nullptr && *standin != '\0')
    return InvalidArgument("DSTRAIN_TEST_DEVICE=\"" + std::string(standin) +
                           "\": the only stand-in device is \"guarded\" (or unset it)");
  if (world_size > 1)
    return NotSupported(
        "dstrain.device \"cuda\" with a world size of " + std::to_string(world_size) +
        " is not supported yet: the groups' NCCL communicators are not wired to the engine; a "
        "device trains one rank. Use dstrain.device \"cpu\" for this layout");
  return CudaTrainingDevice::Open(local_rank);
}

}  // namespace dst
