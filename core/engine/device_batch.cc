#include "core/engine/device_batch.h"

namespace dst {

template <typename T>
const T *DeviceBatch::Upload(const T *host, size_t count, Buffer<T> *copy) {
  if (host == nullptr) return nullptr;
  if (copy->size() < count)
    *copy = Buffer<T>(tracker_, MemoryCategory::kActivations, count, memory_);
  memory_->Upload(copy->data(), host, count * sizeof(T));
  return copy->data();
}

BatchView DeviceBatch::Stage(const BatchView &batch) {
  BatchView staged = batch;
  staged.tokens = Upload(batch.tokens, batch.tokens_count, &tokens_);
  staged.targets = Upload(batch.targets, batch.targets_count, &targets_);
  staged.inputs = Upload(batch.inputs, batch.inputs_count, &inputs_);
  staged.labels = Upload(batch.labels, batch.labels_count, &labels_);
  return staged;
}

}  // namespace dst
