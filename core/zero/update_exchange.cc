#include "core/zero/update_exchange.h"

#include <algorithm>
#include <cstring>

namespace dst {

UpdateExchange::UpdateExchange(const CodecOptions &codec, Communicator *comm, int64_t numel,
                               int64_t bucket_elements, MemoryTracker *tracker)
    : codec_(codec),
      comm_(comm),
      numel_(numel),
      bucket_(std::max<int64_t>(1, std::min(bucket_elements, numel))),
      compressor_(codec, comm, StorageType::kFp32, numel, bucket_, tracker),
      start_(tracker, MemoryCategory::kOptimizerState, size_t(numel)),
      delta_(tracker, MemoryCategory::kCommunication, size_t(bucket_)) {}

void UpdateExchange::Begin(const float *weights) {
  std::memcpy(start_.data(), weights, size_t(numel_) * sizeof(float));
}

Status UpdateExchange::Finish(float *weights) {
  Status st = Exchange(weights);
  if (!st.ok()) std::memcpy(weights, start_.data(), size_t(numel_) * sizeof(float));
  return st;
}

Status UpdateExchange::Exchange(float *weights) {
  const float mean = 1.0f / float(comm_->size());
  float *delta = delta_.data();
  for (int64_t begin = 0; begin < numel_; begin += bucket_) {
    const int64_t n = std::min(bucket_, numel_ - begin);
    float *w = weights + begin;
    const float *start = start_.data() + begin;
    for (int64_t i = 0; i < n; ++i) delta[i] = w[i] - start[i];
    Result<std::unique_ptr<Work>> work = compressor_.Launch(0, delta, begin, n);
    if (!work.ok()) return work.status();
    DST_RETURN_IF_ERROR(work.value()->Wait());
    DST_RETURN_IF_ERROR(compressor_.Complete(0, delta, n));
    for (int64_t i = 0; i < n; ++i) w[i] = start[i] + delta[i] * mean;
  }
  return Status::Ok();
}

}  // namespace dst
