#include "core/optim/state_store.h"

#include <cstring>

namespace dst {

ResidentStateStore::ResidentStateStore(std::vector<std::string> names, int64_t numel,
                                       MemoryTracker *tracker, MemoryResource *memory)
    : StateStore(std::move(names), numel), memory_(memory) {
  for (size_t k = 0; k < this->names().size(); ++k)
    tensors_.emplace_back(tracker, MemoryCategory::kOptimizerState, size_t(numel), memory);
}

Status ResidentStateStore::CheckRange(size_t k, int64_t begin, int64_t count) const {
  if (k >= tensors_.size() || begin < 0 || count < 0 || begin + count > numel())
    return InternalError("optimizer state: tensor " + std::to_string(k) + " elements [" +
                         std::to_string(begin) + ", " + std::to_string(begin + count) +
                         ") outside " + std::to_string(tensors_.size()) + " tensors of " +
                         std::to_string(numel()));
  return Status::Ok();
}

Status ResidentStateStore::Acquire(int64_t begin, int64_t count, StatePiece *piece) {
  if (tensors_.size() > StatePiece::kMaxTensors)
    return InternalError("optimizer state: more tensors than a StatePiece holds");
  for (size_t k = 0; k < tensors_.size(); ++k) DST_RETURN_IF_ERROR(CheckRange(k, begin, count));
  piece->begin = begin;
  piece->count = count;
  piece->tensors.fill(nullptr);
  for (size_t k = 0; k < tensors_.size(); ++k) piece->tensors[k] = tensors_[k].data() + begin;
  return Status::Ok();
}

Status ResidentStateStore::Read(size_t k, int64_t begin, int64_t count, float *out) const {
  DST_RETURN_IF_ERROR(CheckRange(k, begin, count));
  const size_t bytes = size_t(count) * sizeof(float);
  if (memory_)
    memory_->Download(out, tensors_[k].data() + begin, bytes);
  else
    std::memcpy(out, tensors_[k].data() + begin, bytes);
  return Status::Ok();
}

Status ResidentStateStore::Write(size_t k, int64_t begin, int64_t count, const float *in) {
  DST_RETURN_IF_ERROR(CheckRange(k, begin, count));
  const size_t bytes = size_t(count) * sizeof(float);
  if (memory_)
    memory_->Upload(tensors_[k].data() + begin, in, bytes);
  else
    std::memcpy(tensors_[k].data() + begin, in, bytes);
  return Status::Ok();
}

}  // namespace dst
