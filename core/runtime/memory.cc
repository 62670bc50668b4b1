#include "core/runtime/memory.h"

#include <cstdio>
#include <fstream>
#include <optional>

namespace dst {

std::string_view MemoryCategoryName(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kParameters:
      return "parameters";
    case MemoryCategory::kGradients:
      return "gradients";
    case MemoryCategory::kOptimizerState:
      return "optimizer_state";
    case MemoryCategory::kActivations:
      return "activations";
    case MemoryCategory::kCommunication:
      return "communication";
    case MemoryCategory::kOffload:
      return "offload";
  }
  return "unknown";
}

std::string FormatBytes(double bytes) {
  static constexpr const char *kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 5) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", bytes, kUnits[unit]);
  return text;
}

namespace {

// A field of /proc/meminfo in bytes ("MemAvailable"), nullopt when unread.
std::optional<int64_t> MeminfoBytes(std::string_view field) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kilobytes = 0;
  std::string unit;
  while (in >> name >> kilobytes) {
    std::getline(in, unit);
    if (name.size() == field.size() + 1 && name.compare(0, field.size(), field) == 0)
      return kilobytes * 1024;
  }
  return std::nullopt;
}

}  // namespace

void ThrowAllocationError(size_t bytes, MemoryCategory category, const MemoryTracker *tracker,
                          std::string_view device) {
  std::string message = "cannot allocate " + FormatBytes(double(bytes)) + " for " +
                        std::string(MemoryCategoryName(category)) + " in " +
                        (device.empty() ? std::string("host memory") : std::string(device));
  if (tracker != nullptr) {
    message += " (this rank holds " + FormatBytes(double(tracker->TotalCurrent())) + " already";
    message += device.empty() ? ")" : ", " + FormatBytes(double(tracker->DeviceCurrent())) +
                                          " of it on the device)";
  }
  if (device.empty()) {
    if (const std::optional<int64_t> available = MeminfoBytes("MemAvailable"))
      message += "; the host has " + FormatBytes(double(*available)) + " available";
  }
  throw AllocationError(message);
}

namespace {
void RaiseTo(std::atomic<int64_t> &peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}
}  // namespace

void MemoryTracker::Add(MemoryCategory category, int64_t bytes, bool on_device) {
  auto &current = current_[static_cast<int>(category)];
  RaiseTo(peak_[static_cast<int>(category)],
          current.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  RaiseTo(total_peak_, total_current_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  if (on_device)
    RaiseTo(device_peak_, device_current_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void MemoryTracker::Release(MemoryCategory category, int64_t bytes, bool on_device) {
  current_[static_cast<int>(category)].fetch_sub(bytes, std::memory_order_relaxed);
  total_current_.fetch_sub(bytes, std::memory_order_relaxed);
  if (on_device) device_current_.fetch_sub(bytes, std::memory_order_relaxed);
}

void MemoryTracker::ResetPeaks() {
  for (int c = 0; c < kNumMemoryCategories; ++c)
    peak_[size_t(c)].store(current_[size_t(c)].load(std::memory_order_relaxed),
                           std::memory_order_relaxed);
  total_peak_.store(total_current_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  device_peak_.store(device_current_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

int64_t MemoryTracker::Current(MemoryCategory category) const {
  return current_[static_cast<int>(category)].load(std::memory_order_relaxed);
}

int64_t MemoryTracker::Peak(MemoryCategory category) const {
  return peak_[static_cast<int>(category)].load(std::memory_order_relaxed);
}

int64_t MemoryTracker::TotalCurrent() const {
  return total_current_.load(std::memory_order_relaxed);
}

void *MemoryResource::AllocateHost(size_t bytes) {
  return ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t(64), std::nothrow);
}

void MemoryResource::FreeHost(void *p) {
  ::operator delete(p, std::align_val_t(64));
}

}  // namespace dst
