#include "core/engine/training_device.h"

namespace dst {

namespace {
Status In(Status st, const std::string &where) {
  return st.context("dstrain.device \"cuda\": " + where);
}
}  // namespace

Result<std::unique_ptr<TrainingDevice>> TrainingDevice::Open(int64_t local_rank) {
  const std::string what = "dstrain.device \"cuda\": ";
  Result<const CudaRuntime *> runtime = CudaRuntime::Get();
  if (!runtime.ok()) return In(runtime.status(), "no CUDA runtime");
  if (local_rank >= runtime.value()->device_count())
    return Status(Code::kNotSupported,
                  what + "LOCAL_RANK " + std::to_string(local_rank) +
                      " names cuda:" + std::to_string(local_rank) + ", but this machine has " +
                      std::to_string(runtime.value()->device_count()) +
                      " CUDA device(s); launch at most that many ranks per node");
  Result<CudaStream> stream = CudaStream::Create(*runtime.value(), int(local_rank));
  if (!stream.ok())
    return In(stream.status(), "creating a stream on cuda:" + std::to_string(local_rank));
  std::unique_ptr<TrainingDevice> device(new TrainingDevice());
  device->stream_ = std::make_unique<CudaStream>(std::move(stream).value());
  device->memory_ = std::make_unique<CudaDeviceMemory>(*device->stream_);
  Result<std::unique_ptr<CudaKernels>> kernels =
      CudaKernels::Create(*runtime.value(), *device->stream_);
  if (!kernels.ok()) return In(kernels.status(), "the kernel backend");
  device->kernels_ = std::move(kernels).value();
  return device;
}

Status TrainingDevice::TakeStatus() const {
  if (!memory_->status().ok()) return memory_->status();
  return static_cast<const StepKernels &>(*kernels_).TakeError();
}

}  // namespace dst
