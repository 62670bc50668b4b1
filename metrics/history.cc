#include "metrics/history.h"

#include <algorithm>

namespace dst::metrics {

void StepHistory::Push(const StepSample &sample) {
  auto copy = std::make_shared<const StepSample>(sample);  // allocate outside the lock
  std::shared_ptr<const StepSample> dropped;               // freed outside the lock too
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = copy;
  if (capacity_ == 0) return;
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(copy));
    return;
  }
  dropped = std::move(ring_[next_]);
  ring_[next_] = std::move(copy);
  next_ = (next_ + 1) % capacity_;
}

std::vector<std::shared_ptr<const StepSample>> StepHistory::Last(size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t size = ring_.size();
  n = std::min(n, size);
  std::vector<std::shared_ptr<const StepSample>> out;
  out.reserve(n);
  // Oldest is at next_ once the ring is full (next_ is 0 until then).
  const size_t oldest = size < capacity_ ? 0 : next_;
  for (size_t i = size - n; i < size; ++i) out.push_back(ring_[(oldest + i) % size]);
  return out;
}

std::shared_ptr<const StepSample> StepHistory::Latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

size_t StepHistory::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ring_.size();
}

}  // namespace dst::metrics
