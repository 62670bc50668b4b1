// A layer's view of the model's shared scratch (MicroBatch::scratch, sized by
// Layer::ScratchSize): consecutive pieces handed out in order. The same code
// sizes the scratch and carves it: a cursor without a base only counts, so a
// layer's ScratchSize runs the carving of each of its passes on a counting
// cursor and takes the largest.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dst {

template <typename T>
class ScratchCursor {
 public:
  ScratchCursor() = default;  // counting only
  explicit ScratchCursor(T *base) : base_(base) {}
  // The next n elements (null while counting, and for none: a piece a pass
  // does not use is never a pointer into another's).
  T *Take(int64_t n) {
    T *p = base_ != nullptr && n > 0 ? base_ + used_ : nullptr;
    used_ += std::max<int64_t>(n, 0);
    return p;
  }
  int64_t used() const { return used_; }

 private:
  T *base_ = nullptr;
  int64_t used_ = 0;
};

}  // namespace dst
