// ZeRO-Offload's transfer buffers on a device: host memory the gradients
// come down into and the updated weights go up from, two of each way so that
// one chunk's copy runs while the host updates the next (OffloadPipeline in
// data_parallel.cc). Page-locked (MemoryResource::AllocateHost) with
// offload_optimizer.pin_memory, which is what lets a GPU's copies run beside
// the host; else ordinary host memory (the copies then wait for the host).
// Charged to the host's communication bytes (or the category named).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/runtime/memory.h"

namespace dst {

class HostStaging {
 public:
  HostStaging() = default;
  // `device`: the resource whose copies use the buffer (pinned: its
  // AllocateHost). Ordinary memory when it cannot pin (the device keeps why).
  HostStaging(MemoryResource *device, size_t bytes, bool pinned, MemoryTracker *tracker,
              MemoryCategory category = MemoryCategory::kCommunication)
      : tracker_(tracker), category_(category), bytes_(bytes) {
    if (pinned) data_ = device->AllocateHost(bytes), owner_ = data_ ? device : nullptr;
    if (data_ == nullptr) data_ = ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t(64));
    if (tracker_) tracker_->Add(category_, int64_t(bytes_));
  }
  ~HostStaging() { reset(); }
  HostStaging(HostStaging &&other) noexcept { *this = std::move(other); }
  HostStaging &operator=(HostStaging &&other) noexcept {
    if (this != &other) {
      reset();
      std::swap(tracker_, other.tracker_), std::swap(owner_, other.owner_);
      std::swap(category_, other.category_);
      std::swap(data_, other.data_), std::swap(bytes_, other.bytes_);
    }
    return *this;
  }
  HostStaging(const HostStaging &) = delete;
  HostStaging &operator=(const HostStaging &) = delete;

  template <typename T>
  T *as() const {
    return static_cast<T *>(data_);
  }
  bool pinned() const { return owner_ != nullptr; }
  bool empty() const { return data_ == nullptr; }

 private:
  void reset() {
    if (data_ == nullptr) return;
    if (tracker_) tracker_->Release(category_, int64_t(bytes_));
    if (owner_)
      owner_->FreeHost(data_);
    else
      ::operator delete(data_, std::align_val_t(64));
    data_ = nullptr;
  }
  MemoryTracker *tracker_ = nullptr;
  MemoryCategory category_ = MemoryCategory::kCommunication;
  MemoryResource *owner_ = nullptr;  // the pinned memory's, or null (ordinary memory)
  void *data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dst
