// Generation's key/value cache: for each layer with attention
// (Layer::KvCacheWidth), the keys and values of every position of B
// sequences decoded so far, so that a new token costs one position's
// computation instead of the whole prefix's. The model points each layer's
// micro-batch at its view (Model::SetKvCache); the generator says how many
// positions are held (length) and advances it after each forward.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/runtime/memory.h"

namespace dst {

template <typename T>
class KvCache {
 public:
  KvCache() = default;
  // widths: per local layer of the model, Layer::KvCacheWidth (0: none).
  // Charged to kActivations; `memory`: where it lives (null: host memory).
  KvCache(const std::vector<int64_t> &widths, int64_t batch, int64_t capacity,
          MemoryTracker *tracker, MemoryResource *memory = nullptr);

  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  // Positions held, [0, length) of every sequence.
  int64_t length() const { return length_; }
  int64_t free() const { return capacity_ - length_; }
  void Advance(int64_t positions) { length_ += positions; }
  void Clear() { length_ = 0; }
  // Layer i's cache, or null for a layer without one.
  const KvCacheView<T> *layer(size_t i) const {
    return i < views_.size() && views_[i].k != nullptr ? &views_[i] : nullptr;
  }
  // The elements one layer of `width` holds for batch x capacity (keys and values).
  static int64_t Elements(int64_t width, int64_t batch, int64_t capacity) {
    return 2 * width * batch * capacity;
  }

 private:
  int64_t batch_ = 0, capacity_ = 0, length_ = 0;
  Buffer<T> storage_;
  std::vector<KvCacheView<T>> views_;
};

}  // namespace dst
