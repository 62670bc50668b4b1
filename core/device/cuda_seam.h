// The device seam's CUDA side on the host (issue 16): device memory, streams
// and events through the CUDA plugin's runtime table (cuda_runtime_table.h),
// so libdstrain.so reaches a GPU without linking CUDA. Every failure is a
// Status naming the call, the device and CUDA's reason; CUDA's
// out-of-memory is Code::kOutOfMemory, which the CachingAllocator retries
// after returning its cache.
//
//   CudaRuntime         the table, loaded once per process, or why there is none
//   CudaStream          a non-blocking stream (RAII): async copies and fills,
//                       waits on events, synchronize
//   CudaEvent           an event (RAII): recorded on a stream, queried, waited on
//   CudaMemoryResource  one device's cudaMalloc/cudaFree for CachingAllocator
//   PinnedHostBuffer    page-locked host memory (RAII): what async copies
//                       overlap with compute from (ZeRO-Offload's state)
//   CudaDeviceMemory    one device's memory as a MemoryResource (a Model's buffers)
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/common/status.h"
#include "core/device/caching_allocator.h"
#include "core/kernels/cuda/cuda_runtime_table.h"
#include "core/runtime/memory.h"

namespace dst {

// An entry point of this build's CUDA plugin (libdstrain_cuda.so, looked
// up once per symbol by the callers), or why there is none (kNotSupported:
// no CUDA in this build, no plugin on this machine, no such symbol).
Result<void *> CudaPluginEntry(const char *symbol);

class CudaRuntime {
 public:
  // The plugin's runtime; an error (kNotSupported) says why there is none: no
  // plugin in this build or on this machine, no driver, no device.
  static Result<const CudaRuntime *> Get();

  int device_count() const { return device_count_; }
  const DstCudaRuntimeTable &table() const { return table_; }
  // OK for CUDA's success; else "what: CUDA's reason" (kOutOfMemory for an
  // out-of-memory, kInternal otherwise).
  Status Check(int code, const std::string &what) const;

 private:
  DstCudaRuntimeTable table_{};
  int device_count_ = 0;
  friend Result<CudaRuntime> LoadCudaRuntime();
};

// One CUDA object (a stream, an event, pinned memory) owned: destroyed with
// `destroy` (a runtime-table function) when the owner goes; move-only.
class CudaHandle {
 public:
  using Destroy = int (*)(void *);
  CudaHandle() = default;
  CudaHandle(const CudaRuntime *runtime, void *handle, Destroy destroy, const char *what)
      : runtime_(runtime), handle_(handle), destroy_(destroy), what_(what) {}
  CudaHandle(CudaHandle &&other) noexcept { *this = std::move(other); }
  CudaHandle &operator=(CudaHandle &&other) noexcept;
  CudaHandle(const CudaHandle &) = delete;
  CudaHandle &operator=(const CudaHandle &) = delete;
  ~CudaHandle() { Reset(); }

  void *get() const { return handle_; }
  const CudaRuntime &runtime() const { return *runtime_; }

 private:
  void Reset();  // destroys the object (a failure is logged: destructors do not fail)
  const CudaRuntime *runtime_ = nullptr;
  void *handle_ = nullptr;
  Destroy destroy_ = nullptr;
  const char *what_ = "";
};

class CudaEvent;

// Page-locked host memory of `bytes`, freed with the object.
class PinnedHostBuffer {
 public:
  static Result<PinnedHostBuffer> Allocate(const CudaRuntime &runtime, size_t bytes);

  void *data() const { return memory_.get(); }  // null once moved from
  size_t size() const { return size_; }

 private:
  PinnedHostBuffer(CudaHandle memory, size_t size) : memory_(std::move(memory)), size_(size) {}
  CudaHandle memory_;
  size_t size_ = 0;
};

// A non-blocking stream on one device, destroyed (after its work) with the object.
class CudaStream {
 public:
  static Result<CudaStream> Create(const CudaRuntime &runtime, int device);

  void *handle() const { return handle_.get(); }
  int device() const { return device_; }
  // The CachingAllocator's key for blocks used on this stream.
  StreamId id() const { return StreamId(reinterpret_cast<uintptr_t>(handle())); }
  // kind: DST_CUDA_HOST_TO_DEVICE, DST_CUDA_DEVICE_TO_HOST, DST_CUDA_DEVICE_TO_DEVICE.
  Status CopyAsync(void *dst, const void *src, size_t bytes, int kind) const;
  Status FillAsync(void *dst, int byte_value, size_t bytes) const;
  // Work queued on this stream after this call waits for `event` (the host does not).
  Status Wait(const CudaEvent &event) const;
  // The same for an event another module owns (a cudaEvent_t: a collective's
  // Work::CompletionEvent); a null event is no wait.
  Status WaitEvent(void *event) const;
  // Waits on the host for the stream's work; first runs the hook
  // SetBeforeHostWait installed (a failure is returned, and no wait).
  Status Synchronize() const;
  // That hook alone: what any host wait on this stream's work runs first.
  Status BeforeHostWait() const { return before_host_wait_ ? before_host_wait_() : Status::Ok(); }
  // What must happen before the host waits for this stream: the engine's
  // WorkOrder::Drain, so a collective the stream waits on that never comes
  // (a dead peer) is named after its timeout instead of a hung wait.
  void SetBeforeHostWait(std::function<Status()> hook) { before_host_wait_ = std::move(hook); }

  const CudaRuntime &runtime() const { return handle_.runtime(); }

 private:
  CudaStream(CudaHandle handle, int device) : handle_(std::move(handle)), device_(device) {}
  CudaHandle handle_;
  int device_ = 0;
  std::function<Status()> before_host_wait_;
};

// An event without timing on one device, destroyed with the object.
class CudaEvent {
 public:
  static Result<CudaEvent> Create(const CudaRuntime &runtime, int device);

  void *handle() const { return handle_.get(); }
  // Marks the point of `stream`'s queue it completes at.
  Status Record(const CudaStream &stream) const;
  // Whether the work before the recorded point has finished (without blocking).
  Result<bool> Done() const;
  Status Synchronize() const;

 private:
  explicit CudaEvent(CudaHandle handle) : handle_(std::move(handle)) {}
  const CudaRuntime &runtime() const { return handle_.runtime(); }
  CudaHandle handle_;
};

// cudaMalloc / cudaFree on one device: the segments of a CachingAllocator.
class CudaMemoryResource final : public DeviceMemoryResource {
 public:
  CudaMemoryResource(const CudaRuntime &runtime, int device) : runtime_(runtime), device_(device) {}
  Result<void *> Allocate(size_t bytes) override;
  void Free(void *ptr) override;
  std::string name() const override { return "cuda:" + std::to_string(device_); }

 private:
  const CudaRuntime &runtime_;
  int device_;
};

// One device's memory as a MemoryResource (what a Model's buffers live in
// on a GPU): blocks of a CachingAllocator over cudaMalloc'd segments (a
// freed buffer's block is reused, so a step that frees and allocates again
// allocates nothing from the device), zeroed, copied to and from the host
// and zeroed on `stream` (which must outlive it; every block is used on it),
// each call complete on return. The asynchronous copies run on a copy
// stream of their own (made on first use), each after an event of `stream`:
// a gradient's copy to the host does not hold back the kernels queued after
// it (ZeRO-Offload's backward). The first failure is kept (status());
// Allocate returns null on one. The buffers charge their own categories.
class CudaDeviceMemory final : public MemoryResource {
 public:
  explicit CudaDeviceMemory(const CudaStream &stream);
  std::string_view name() const override { return name_; }
  void *Allocate(size_t bytes) override;
  void Free(void *p) override;
  void Upload(void *dst, const void *src, size_t bytes) override;
  void Download(void *dst, const void *src, size_t bytes) override;
  void Zero(void *dst, size_t bytes) override;
  // Copies on the copy stream after the work queued on `stream` so far, each
  // followed by an event (a ring of kCopyMarks): WaitCopy synchronizes the
  // mark's event (or a later copy's, which completes after it), after the
  // stream's BeforeHostWait; OrderAfterCopies makes `stream` wait for the
  // last one.
  uint64_t DownloadAsync(void *host, const void *src, size_t bytes) override;
  uint64_t UploadAsync(void *dst, const void *host, size_t bytes) override;
  void WaitCopy(uint64_t mark) override;
  void OrderAfterCopies() override;
  // Page-locked host memory (PinnedHostBuffer); null (the failure kept in
  // status()) when the OS refuses it.
  void *AllocateHost(size_t bytes) override;
  void FreeHost(void *p) override;
  const Status &status() const { return status_; }
  CachingAllocatorStats stats() const { return cache_.stats(); }
  // Whether `p` points into memory this object handed out.
  bool Owns(const void *p) const { return cache_.Owns(p); }

 private:
  static constexpr uint64_t kCopyMarks = 4;
  bool Keep(Status st);  // true when st is OK
  // The copy stream, its next work ordered after `stream`'s so far (null: failed).
  const CudaStream *CopyStreamAfterCompute();
  uint64_t Mark();  // records the next copy mark's event on the copy stream (0: failed)
  const CudaStream &stream_;
  std::string name_;
  Status status_;
  CudaMemoryResource segments_;
  CachingAllocator cache_;
  std::vector<CudaEvent> copy_events_;  // [kCopyMarks], made on first use
  uint64_t copy_marks_ = 0, ordered_marks_ = 0;
  std::optional<CudaStream> copy_stream_;   // made on the first asynchronous copy
  std::optional<CudaEvent> compute_point_;  // where on `stream` the next copy starts
  std::unordered_map<void *, PinnedHostBuffer> pinned_;
};

}  // namespace dst
