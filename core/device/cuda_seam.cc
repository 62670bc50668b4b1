#include "core/device/cuda_seam.h"

#include <utility>

#include "core/common/log.h"
#include "core/runtime/plugin.h"

namespace dst {

Result<void *> CudaPluginEntry(const char *symbol) {
#if !DSTRAIN_HAVE_CUDA
  (void)symbol;
  return Status(Code::kNotSupported,
                "this build has no CUDA backend (nvcc was not found when it was built)");
#else
  const OpenedPlugin plugin =
      OpenPlugin({"libdstrain_cuda.so", "DSTRAIN_CUDA_PLUGIN", DSTRAIN_CUDA_PLUGIN_BUILD_PATH,
                  symbol, "the CUDA runtime"});
  if (plugin.entry == nullptr) return Status(Code::kNotSupported, plugin.error);
  return plugin.entry;
#endif
}

Result<CudaRuntime> LoadCudaRuntime() {
  const Result<void *> entry = CudaPluginEntry("dst_cuda_plugin_runtime");
  if (!entry.ok()) return entry.status();
  CudaRuntime runtime;
  runtime.table_.size = sizeof runtime.table_;
  if (reinterpret_cast<DstCudaRuntimeFn>(entry.value())(&runtime.table_) != 0 ||
      runtime.table_.size != sizeof runtime.table_)
    return Status(Code::kNotSupported,
                  "the CUDA plugin's runtime table is older than this libdstrain (reinstall both "
                  "from one build)");
  const int code = runtime.table_.device_count(&runtime.device_count_);
  if (code != DST_CUDA_SUCCESS || runtime.device_count_ == 0)
    return Status(
        Code::kNotSupported,
        std::string("the CUDA runtime sees no device") +
            (code != DST_CUDA_SUCCESS ? std::string(": ") + runtime.table_.error_string(code)
                                      : std::string()));
  return runtime;
}

Result<const CudaRuntime *> CudaRuntime::Get() {
  static const Result<CudaRuntime> runtime = LoadCudaRuntime();
  if (!runtime.ok()) return runtime.status();
  return &runtime.value();
}

Status CudaRuntime::Check(int code, const std::string &what) const {
  if (code == DST_CUDA_SUCCESS) return Status::Ok();
  return Status(code == DST_CUDA_OUT_OF_MEMORY ? Code::kOutOfMemory : Code::kInternal,
                what + ": " + table_.error_string(code));
}

// ---- CudaHandle

CudaHandle &CudaHandle::operator=(CudaHandle &&other) noexcept {
  if (this != &other) {
    Reset();
    runtime_ = other.runtime_;
    handle_ = std::exchange(other.handle_, nullptr);
    destroy_ = other.destroy_;
    what_ = other.what_;
  }
  return *this;
}

void CudaHandle::Reset() {
  if (handle_ == nullptr) return;
  const Status st = runtime_->Check(destroy_(std::exchange(handle_, nullptr)),
                                    std::string("destroying ") + what_);
  if (!st.ok()) DST_LOG(kWarning, "cuda", st.message());
}

// ---- CudaStream

Result<CudaStream> CudaStream::Create(const CudaRuntime &runtime, int device) {
  void *handle = nullptr;
  DST_RETURN_IF_ERROR(runtime.Check(runtime.table().stream_create(device, &handle),
                                    "creating a stream on cuda:" + std::to_string(device)));
  return CudaStream(CudaHandle(&runtime, handle, runtime.table().stream_destroy, "a stream"),
                    device);
}

Status CudaStream::CopyAsync(void *dst, const void *src, size_t bytes, int kind) const {
  return runtime().Check(
      runtime().table().memcpy_async(dst, src, bytes, kind, handle()),
      "copying " + std::to_string(bytes) + " bytes on a stream of cuda:" + std::to_string(device_));
}

Status CudaStream::FillAsync(void *dst, int byte_value, size_t bytes) const {
  return runtime().Check(
      runtime().table().memset_async(dst, byte_value, bytes, handle()),
      "filling " + std::to_string(bytes) + " bytes on a stream of cuda:" + std::to_string(device_));
}

Status CudaStream::Wait(const CudaEvent &event) const {
  return WaitEvent(event.handle());
}

Status CudaStream::WaitEvent(void *event) const {
  if (event == nullptr) return Status::Ok();
  return runtime().Check(runtime().table().stream_wait_event(handle(), event),
                         "a stream of cuda:" + std::to_string(device_) + " waiting for an event");
}

Status CudaStream::Synchronize() const {
  if (before_host_wait_) DST_RETURN_IF_ERROR(before_host_wait_());
  return runtime().Check(runtime().table().stream_synchronize(handle()),
                         "synchronizing a stream of cuda:" + std::to_string(device_));
}

// ---- CudaEvent

Result<CudaEvent> CudaEvent::Create(const CudaRuntime &runtime, int device) {
  void *handle = nullptr;
  DST_RETURN_IF_ERROR(runtime.Check(runtime.table().event_create(device, &handle),
                                    "creating an event on cuda:" + std::to_string(device)));
  return CudaEvent(CudaHandle(&runtime, handle, runtime.table().event_destroy, "an event"));
}

Status CudaEvent::Record(const CudaStream &stream) const {
  return runtime().Check(runtime().table().event_record(handle(), stream.handle()),
                         "recording an event");
}

Result<bool> CudaEvent::Done() const {
  const int code = runtime().table().event_query(handle());
  if (code == DST_CUDA_NOT_READY) return false;
  DST_RETURN_IF_ERROR(runtime().Check(code, "querying an event"));
  return true;
}

Status CudaEvent::Synchronize() const {
  return runtime().Check(runtime().table().event_synchronize(handle()), "waiting for an event");
}

// ---- CudaMemoryResource

Result<void *> CudaMemoryResource::Allocate(size_t bytes) {
  void *ptr = nullptr;
  DST_RETURN_IF_ERROR(
      runtime_.Check(runtime_.table().malloc(device_, bytes, &ptr),
                     "cudaMalloc of " + std::to_string(bytes) + " bytes on " + name()));
  return ptr;
}

void CudaMemoryResource::Free(void *ptr) {
  const Status st = runtime_.Check(runtime_.table().free(device_, ptr), "cudaFree on " + name());
  if (!st.ok()) DST_LOG(kWarning, "cuda", st.message());
}

// ---- PinnedHostBuffer

Result<PinnedHostBuffer> PinnedHostBuffer::Allocate(const CudaRuntime &runtime, size_t bytes) {
  void *data = nullptr;
  const Status st = runtime.Check(runtime.table().host_alloc(bytes, &data),
                                  "pinning " + std::to_string(bytes) + " bytes of host memory");
  if (!st.ok())
    return Status(st.code(), st.message() +
                                 " (page-locked memory is bounded by RAM and `ulimit -l`; "
                                 "offload_optimizer.pin_memory: false avoids it)");
  return PinnedHostBuffer(
      CudaHandle(&runtime, data, runtime.table().host_free, "pinned host memory"), bytes);
}

// ---- CudaDeviceMemory

CudaDeviceMemory::CudaDeviceMemory(const CudaStream &stream)
    : stream_(stream),
      name_("cuda:" + std::to_string(stream.device())),
      segments_(stream.runtime(), stream.device()),
      cache_(&segments_, nullptr) {}

bool CudaDeviceMemory::Keep(Status st) {
  if (st.ok()) return true;
  if (status_.ok()) status_ = std::move(st);
  return false;
}

void *CudaDeviceMemory::Allocate(size_t bytes) {
  if (bytes == 0) bytes = 1;
  Result<void *> p = cache_.Allocate(bytes, stream_.id(), MemoryCategory::kParameters);
  if (!Keep(p.status())) return nullptr;
  if (Keep(stream_.FillAsync(p.value(), 0, bytes)) && Keep(stream_.Synchronize())) return p.value();
  Free(p.value());
  return nullptr;
}

void CudaDeviceMemory::Free(void *p) {
  if (p != nullptr) Keep(cache_.Free(p));
}

void CudaDeviceMemory::Upload(void *dst, const void *src, size_t bytes) {
  if (Keep(stream_.CopyAsync(dst, src, bytes, DST_CUDA_HOST_TO_DEVICE)))
    Keep(stream_.Synchronize());
}

void CudaDeviceMemory::Download(void *dst, const void *src, size_t bytes) {
  if (Keep(stream_.CopyAsync(dst, src, bytes, DST_CUDA_DEVICE_TO_HOST)))
    Keep(stream_.Synchronize());
}

void CudaDeviceMemory::Zero(void *dst, size_t bytes) {
  if (Keep(stream_.FillAsync(dst, 0, bytes))) Keep(stream_.Synchronize());
}

const CudaStream *CudaDeviceMemory::CopyStreamAfterCompute() {
  if (!copy_stream_) {
    Result<CudaStream> copies = CudaStream::Create(stream_.runtime(), stream_.device());
    if (!Keep(copies.status())) return nullptr;
    Result<CudaEvent> point = CudaEvent::Create(stream_.runtime(), stream_.device());
    if (!Keep(point.status())) return nullptr;
    copy_stream_.emplace(std::move(copies).value());
    compute_point_.emplace(std::move(point).value());
  }
  // A wait captures the event as recorded now: one event serves every copy.
  if (!Keep(compute_point_->Record(stream_)) || !Keep(copy_stream_->Wait(*compute_point_)))
    return nullptr;
  return &*copy_stream_;
}

uint64_t CudaDeviceMemory::Mark() {
  while (copy_events_.size() < kCopyMarks) {
    Result<CudaEvent> event = CudaEvent::Create(stream_.runtime(), stream_.device());
    if (!Keep(event.status())) return 0;
    copy_events_.push_back(std::move(event).value());
  }
  const uint64_t mark = ++copy_marks_;
  return Keep(copy_events_[mark % kCopyMarks].Record(*copy_stream_)) ? mark : 0;
}

uint64_t CudaDeviceMemory::DownloadAsync(void *host, const void *src, size_t bytes) {
  const CudaStream *copies = CopyStreamAfterCompute();
  return copies && Keep(copies->CopyAsync(host, src, bytes, DST_CUDA_DEVICE_TO_HOST)) ? Mark() : 0;
}

uint64_t CudaDeviceMemory::UploadAsync(void *dst, const void *host, size_t bytes) {
  const CudaStream *copies = CopyStreamAfterCompute();
  return copies && Keep(copies->CopyAsync(dst, host, bytes, DST_CUDA_HOST_TO_DEVICE)) ? Mark() : 0;
}

void CudaDeviceMemory::WaitCopy(uint64_t mark) {
  if (mark == 0 || copy_events_.empty()) return;  // done on return, or never queued
  if (Keep(stream_.BeforeHostWait())) Keep(copy_events_[mark % kCopyMarks].Synchronize());
}

void CudaDeviceMemory::OrderAfterCopies() {
  if (copy_marks_ == ordered_marks_ || copy_events_.empty()) return;  // nothing new to wait for
  ordered_marks_ = copy_marks_;
  Keep(stream_.Wait(copy_events_[copy_marks_ % kCopyMarks]));
}

void *CudaDeviceMemory::AllocateHost(size_t bytes) {
  Result<PinnedHostBuffer> buffer = PinnedHostBuffer::Allocate(stream_.runtime(), bytes);
  if (!Keep(buffer.status())) return nullptr;
  void *p = buffer.value().data();
  pinned_.emplace(p, std::move(buffer).value());
  return p;
}

void CudaDeviceMemory::FreeHost(void *p) {
  pinned_.erase(p);
}

}  // namespace dst
