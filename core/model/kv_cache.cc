#include "core/model/kv_cache.h"

namespace dst {

template <typename T>
KvCache<T>::KvCache(const std::vector<int64_t> &widths, int64_t batch, int64_t capacity,
                    MemoryTracker *tracker, MemoryResource *memory)
    : batch_(batch), capacity_(capacity) {
  int64_t total = 0;
  for (int64_t w : widths) total += Elements(w, batch, capacity);
  storage_ = Buffer<T>(tracker, MemoryCategory::kActivations, size_t(total), memory);
  views_.resize(widths.size());
  T *next = storage_.data();
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] == 0) continue;
    const int64_t half = widths[i] * batch * capacity;
    views_[i] = {next, next + half, capacity};
    next += 2 * half;
  }
}

template class KvCache<float>;
template class KvCache<double>;

}  // namespace dst
