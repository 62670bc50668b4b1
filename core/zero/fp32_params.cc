#include "core/zero/fp32_params.h"

#include <algorithm>
#include <cstring>

namespace dst {

Fp32Params::Fp32Params(const PartitionPlan *plan, ParamStore<float> *store, MemoryTracker *tracker,
                       uint64_t seed, StepPlacement placement)
    : plan_(plan),
      decls_(&store->decls()),
      ops_(placement),
      values_(tracker, MemoryCategory::kParameters, size_t(plan->fp32.size), placement.memory),
      grads_(tracker, MemoryCategory::kGradients, size_t(plan->fp32.size), placement.memory) {
  std::vector<float> initial;  // made on the host
  for (const Segment &s : plan->fp32.segments) {
    initial.resize(size_t(s.size()));
    store->InitializeRange(seed, s.begin, s.end, initial.data());
    ops_.Upload(values_.data() + s.staged, initial.data(), initial.size() * sizeof(float));
  }
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

void Fp32Params::OverlayGrads(int64_t begin, int64_t n, float *dst, bool host_dst) const {
  ForEachOverlap(begin, n, [&](int64_t flat, int64_t at, int64_t count) {
    if (host_dst)
      ops_.Download(dst + (flat - begin), grads_.data() + at, size_t(count) * sizeof(float));
    else
      ops_.kernels().CopyRange(grads_.data() + at, count, dst + (flat - begin));
  });
}

// In double, element by element in flat order, on the host (the fp32
// tensors are few and small: off the host they are read back first).
double Fp32Params::GradSquares(ShardInfo range, const std::vector<int> &excluded) const {
  std::vector<float> host;
  const float *grads = grads_.data();
  if (!ops_.on_host()) {
    host.resize(grads_.size());
    ops_.Download(host.data(), grads_.data(), host.size() * sizeof(float));
    grads = host.data();
  }
  double sum = 0;
  ForEachOverlap(range.offset, range.size, [&](int64_t, int64_t at, int64_t count) {
    for (int64_t i = 0; i < count; ++i) sum += double(grads[at + i]) * grads[at + i];
  });
  for (int id : excluded) {
    const ParamDecl &d = (*decls_)[size_t(id)];
    if (Find(id) == nullptr) continue;
    const int64_t lo = std::max(d.offset, range.offset);
    const int64_t hi = std::min(d.offset + d.numel, range.offset + range.size);
    if (lo < hi)
      ForEachOverlap(lo, hi - lo, [&](int64_t, int64_t at, int64_t count) {
        for (int64_t i = 0; i < count; ++i) sum -= double(grads[at + i]) * grads[at + i];
      });
  }
  return sum;
}

void Fp32Params::TakeValues(int64_t begin, int64_t n, const float *src, bool host_src) {
  ForEachOverlap(begin, n, [&](int64_t flat, int64_t at, int64_t count) {
    if (host_src)
      ops_.Upload(values_.data() + at, src + (flat - begin), size_t(count) * sizeof(float));
    else
      ops_.kernels().CopyRange(src + (flat - begin), count, values_.data() + at);
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
      ops_.ZeroFloats(v, s.size());
      continue;
    }
    ops_.ZeroFloats(v, lo - s.begin);
    ops_.ZeroFloats(v + (hi - s.begin), s.end - hi);
  }
  Status st = dp.AllReduceSum(values_.data(), size())->Wait();
  return st.ok() ? st : st.context("sharing the updated fp32 (override_modules) parameters");
}

}  // namespace dst
