// Memory accounting by category. Every large buffer in the engine is a
// Buffer<T> charged to one category of one MemoryTracker, so the bytes the
// engine reports are the bytes it holds, not an estimate.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <utility>

namespace dst {

enum class MemoryCategory {
  kParameters,
  kGradients,
  kOptimizerState,
  kActivations,
  kCommunication,
  kOffload,
};
inline constexpr int kNumMemoryCategories = 6;

// "parameters", "gradients", "optimizer_state", "activations", "communication", "offload".
std::string_view MemoryCategoryName(MemoryCategory category);

class MemoryTracker;

// A failed allocation that says what was asked for, for what, where, what
// this tracker already held and what the host had available. A bad_alloc,
// so code that catches those still does; what() is the whole sentence.
class AllocationError : public std::bad_alloc {
 public:
  explicit AllocationError(std::string message) : message_(std::move(message)) {}
  const char *what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Throws AllocationError for `bytes` of `category` in host memory (or in
// `device`, a MemoryResource name, when not empty).
[[noreturn]] void ThrowAllocationError(size_t bytes, MemoryCategory category,
                                       const MemoryTracker *tracker, std::string_view device);

// "1.50 GiB", "312.0 MiB", "512 B".
std::string FormatBytes(double bytes);

class MemoryTracker {
 public:
  // `on_device`: the bytes are a device's (a MemoryResource's), counted in
  // the category and in the device's total too.
  void Add(MemoryCategory category, int64_t bytes, bool on_device = false);
  void Release(MemoryCategory category, int64_t bytes, bool on_device = false);
  int64_t Current(MemoryCategory category) const;
  int64_t Peak(MemoryCategory category) const;
  int64_t TotalCurrent() const;
  int64_t TotalPeak() const { return total_peak_.load(std::memory_order_relaxed); }
  // Of those, the bytes in a device's memory (0 on the CPU).
  int64_t DeviceCurrent() const { return device_current_.load(std::memory_order_relaxed); }
  int64_t DevicePeak() const { return device_peak_.load(std::memory_order_relaxed); }
  // Peaks restart from the current figures (the engine does this once it is
  // built, so set-up transients do not count as training peaks).
  void ResetPeaks();

 private:
  std::array<std::atomic<int64_t>, kNumMemoryCategories> current_{};
  std::array<std::atomic<int64_t>, kNumMemoryCategories> peak_{};
  std::atomic<int64_t> total_current_{0};
  std::atomic<int64_t> total_peak_{0};
  std::atomic<int64_t> device_current_{0};
  std::atomic<int64_t> device_peak_{0};
};

// Where a buffer's memory lives when not in host memory (a device:
// core/runtime/cuda_memory.h; a test's guarded pages). The host reaches it
// only through Upload, Download and Zero; kernels reach it through the
// matching kernel backend (core/kernels/kernels.h).
class MemoryResource {
 public:
  virtual ~MemoryResource() = default;
  virtual std::string_view name() const = 0;  // "cuda:0"
  // `bytes` of zeroed memory aligned to at least 64 bytes; null when out of memory.
  virtual void *Allocate(size_t bytes) = 0;
  virtual void Free(void *p) = 0;
  // Host <-> resource copies and a fill with zeros; each complete on return.
  virtual void Upload(void *dst, const void *src, size_t bytes) = 0;
  virtual void Download(void *dst, const void *src, size_t bytes) = 0;
  virtual void Zero(void *dst, size_t bytes) = 0;

  // The same copies queued on the resource's copy stream, behind the work
  // queued before them and overlapping the work queued after them, the host
  // going on: it must not read a download's `host` buffer, nor write an
  // upload's, until WaitCopy(the mark returned); and work queued later must
  // not write a download's source, nor read an upload's destination, until
  // WaitCopy or OrderAfterCopies. By default each completes on return (mark 0).
  virtual uint64_t DownloadAsync(void *host, const void *src, size_t bytes) {
    Download(host, src, bytes);
    return 0;
  }
  virtual uint64_t UploadAsync(void *dst, const void *host, size_t bytes) {
    Upload(dst, host, bytes);
    return 0;
  }
  // Returns once the copy `mark` names (and every one queued before it) is done.
  virtual void WaitCopy(uint64_t mark) { (void)mark; }
  // Work queued from now on (kernels, copies, collectives) waits for the
  // asynchronous copies queued so far; the host does not.
  virtual void OrderAfterCopies() {}
  // Host memory (64-byte aligned) the asynchronous copies run from and to at
  // full speed — page-locked on a GPU; null when none can be had. Given back
  // with FreeHost. By default ordinary host memory.
  virtual void *AllocateHost(size_t bytes);
  virtual void FreeHost(void *p);
  // The bytes a chunked pass over this memory covers at a time (the step's
  // 16-bit and offloaded updates): large, since on a GPU each chunk costs
  // kernel launches and copies.
  virtual size_t chunk_bytes() const { return size_t(4) << 20; }
};

// A zero-initialised, 64-byte aligned array of trivially copyable T, charged
// to a category of a tracker for its lifetime, in host memory or in
// `resource`'s (the tracker then counts that device's bytes). Move-only.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(MemoryTracker *tracker, MemoryCategory category, size_t count,
         MemoryResource *resource = nullptr)
      : tracker_(tracker), category_(category), count_(count), resource_(resource) {
    if (count_ == 0) return;
    if (resource_) {
      data_ = static_cast<T *>(resource_->Allocate(bytes()));
      if (data_ == nullptr) ThrowAllocationError(bytes(), category_, tracker_, resource_->name());
    } else {
      data_ = static_cast<T *>(
          ::operator new[](bytes(), std::align_val_t(kAlignment), std::nothrow));
      if (data_ == nullptr) ThrowAllocationError(bytes(), category_, tracker_, {});
      std::memset(static_cast<void *>(data_), 0, bytes());
    }
    if (tracker_) tracker_->Add(category_, static_cast<int64_t>(bytes()), resource_ != nullptr);
  }
  ~Buffer() { reset(); }
  Buffer(Buffer &&other) noexcept { *this = std::move(other); }
  Buffer &operator=(Buffer &&other) noexcept {
    if (this != &other) {
      reset();
      std::swap(tracker_, other.tracker_);
      std::swap(category_, other.category_);
      std::swap(data_, other.data_);
      std::swap(count_, other.count_);
      std::swap(owned_, other.owned_);
      std::swap(resource_, other.resource_);
    }
    return *this;
  }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;

  // A non-owning view of `count` elements at `data` (memory someone else
  // owns and charges): freed by nobody, charged to nothing.
  static Buffer View(T *data, size_t count) {
    Buffer b;
    b.data_ = data;
    b.count_ = count;
    b.owned_ = false;
    return b;
  }

  T *data() { return data_; }
  const T *data() const { return data_; }
  // Where the memory lives: null for host memory.
  MemoryResource *resource() const { return resource_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  T &operator[](size_t i) { return data_[i]; }
  const T &operator[](size_t i) const { return data_[i]; }
  void zero() {
    if (!data_) return;
    if (resource_)
      resource_->Zero(data_, bytes());
    else
      std::memset(static_cast<void *>(data_), 0, bytes());
  }

 private:
  static constexpr size_t kAlignment = 64;
  void reset() {
    if (!data_) return;
    if (owned_) {
      if (tracker_)
        tracker_->Release(category_, static_cast<int64_t>(bytes()), resource_ != nullptr);
      if (resource_)
        resource_->Free(data_);
      else
        ::operator delete[](data_, std::align_val_t(kAlignment));
    }
    data_ = nullptr;
    count_ = 0;
    owned_ = true;
    resource_ = nullptr;
  }

  MemoryTracker *tracker_ = nullptr;
  MemoryCategory category_ = MemoryCategory::kActivations;
  T *data_ = nullptr;
  size_t count_ = 0;
  bool owned_ = true;
  MemoryResource *resource_ = nullptr;
};

}  // namespace dst
