#include "core/zero/fp32_params.h"

#include <algorithm>
#include <cstring>

namespace dst {

Fp32Params::Fp32Params(const PartitionPlan *plan, ParamStore<float> *store, MemoryTracker *tracker,
                       uint64_t seed)
    : plan_(plan),
      decls_(&store->decls()),
      values_(tracker, MemoryCategory::kParameters, size_t(plan->fp32.size)),
      grads_(tracker, MemoryCategory::kGradients, size_t(plan->fp32.size)) {
  for (const Segment &s : plan->fp32.segments)
    store->InitializeRange(seed, s.begin, s.end, values_.data() + s.staged);
  for (const TensorSlot &slot : plan->fp32.slots) {
    store->SetParamPointer(slot.id, values_.data() + slot.staged);
    store->SetGradPointer(slot.id, grads_.data() + slot.staged);
  }
}

const TensorSlot *Fp32Params::Find(int id) const {
  for (const TensorSlot &slot : plan_->fp32.slots)
    if (slot.id == id) return &slot;
  return nullptr;
}

template <typename Fn>
void Fp32Params::ForEachOverlap(int64_t begin, int64_t n, Fn &&fn) const {
  for (const Segment &s : plan_->fp32.segments) {
    const int64_t lo = std::max(begin, s.begin), hi = std::min(begin + n, s.end);
    if (lo < hi) fn(lo, s.staged + (lo - s.begin), hi - lo);
  }
}

Status Fp32Params::ReduceGrads(Communicator &dp) {
  if (dp.size() == 1 || size() == 0) return Status::Ok();
  Status st = dp.AllReduceSum(grads_.data(), size())->Wait();
  return st.ok() ? st : st.context("reducing the fp32 (override_modules) gradients");
}

void Fp32Params::OverlayGrads(int64_t begin, int64_t n, float *dst) const {
  ForEachOverlap(begin, n, [&](int64_t flat, int64_t at, int64_t count) {
    std::memcpy(dst + (flat - begin), grads_.data() + at, size_t(count) * sizeof(float));
  });
}

double Fp32Params::GradSquares(ShardInfo range, const std::vector<int> &excluded) const {
  double sum = 0;
  ForEachOverlap(range.offset, range.size, [&](int64_t, int64_t at, int64_t count) {
    for (int64_t i = 0; i < count; ++i)
      sum += double(grads_.data()[at + i]) * grads_.data()[at + i];
  });
  for (int id : excluded) {
    const ParamDecl &d = (*decls_)[size_t(id)];
    if (Find(id) == nullptr) continue;
    const int64_t lo = std::max(d.offset, range.offset);
    const int64_t hi = std::min(d.offset + d.numel, range.offset + range.size);
    if (lo < hi)
      ForEachOverlap(lo, hi - lo, [&](int64_t, int64_t at, int64_t count) {
        for (int64_t i = 0; i < count; ++i)
          sum -= double(grads_.data()[at + i]) * grads_.data()[at + i];
      });
  }
  return sum;
}

void Fp32Params::TakeValues(int64_t begin, int64_t n, const float *src) {
  ForEachOverlap(begin, n, [&](int64_t flat, int64_t at, int64_t count) {
    std::memcpy(values_.data() + at, src + (flat - begin), size_t(count) * sizeof(float));
  });
}

Status Fp32Params::ShareValues(Communicator &dp, ShardInfo mine) {
  if (dp.size() == 1 || size() == 0) return Status::Ok();
  // Each element is non-zero on its owner only: the sum is an all-gather of
  // uneven pieces, exact in fp32 (x + 0 = x).
  for (const Segment &s : plan_->fp32.segments) {
    const int64_t lo = std::max(s.begin, mine.offset);
    const int64_t hi = std::min(s.end, mine.offset + mine.size);
    float *v = values_.data() + s.staged;
    if (lo >= hi) {
      std::fill(v, v + s.size(), 0.0f);
      continue;
    }
    std::fill(v, v + (lo - s.begin), 0.0f);
    std::fill(v + (hi - s.begin), v + s.size(), 0.0f);
  }
  Status st = dp.AllReduceSum(values_.data(), size())->Wait();
  return st.ok() ? st : st.context("sharing the updated fp32 (override_modules) parameters");
}

}  // namespace dst
