// StepHistory: the last `capacity` StepSamples, oldest first, for
// /api/v1/history and /api/v1/snapshot. Samples are kept as shared immutable
// copies, so a reader takes the lock only to copy pointers and builds its JSON
// outside it; the engine thread's Push never waits on a slow HTTP client.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "metrics/step_sample.h"

namespace dst::metrics {

class StepHistory {
 public:
  // capacity 0 keeps nothing (Latest still answers).
  explicit StepHistory(size_t capacity) : capacity_(capacity) {}

  // Thread-safe. Copies the sample once; past capacity, the oldest is dropped.
  void Push(const StepSample &sample);

  // The newest `n` samples (all when n >= size()), oldest first. Thread-safe.
  std::vector<std::shared_ptr<const StepSample>> Last(size_t n) const;
  // The newest sample, or null before the first Push. Thread-safe.
  std::shared_ptr<const StepSample> Latest() const;

  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  // Ring buffer: grows to capacity_, then slot next_ holds the oldest sample.
  std::vector<std::shared_ptr<const StepSample>> ring_;
  size_t next_ = 0;
  std::shared_ptr<const StepSample> latest_;
};

}  // namespace dst::metrics
