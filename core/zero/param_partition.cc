#include "core/zero/param_partition.h"

#include <algorithm>
#include <cstring>

namespace dst {

ParameterPartition::ParameterPartition(const PartitionPlan *plan, const ShardLayout &layout,
                                       Communicator *comm, ParamStore<float> *store,
                                       MemoryTracker *tracker, uint64_t seed,
                                       int64_t prefetch_elements)
    : plan_(plan),
      layout_(layout),
      comm_(comm),
      store_(store),
      mine_(layout.Shard(comm->rank())),
      prefetch_elements_(prefetch_elements),
      shard_(tracker, MemoryCategory::kParameters, size_t(layout.shard_size())),
      persistent_(tracker, MemoryCategory::kParameters, size_t(plan->persistent.size)) {
  const size_t staging = size_t(plan->max_param_staging);
  staging_[0] = Buffer<float>(tracker, MemoryCategory::kCommunication, staging);
  if (prefetch_elements_ > 0)
    staging_[1] = Buffer<float>(tracker, MemoryCategory::kCommunication, staging);
  // Until a layer is gathered its tensors point into the staging buffer, so
  // that a pass cut short by an error reads only memory this object owns.
  for (const StagingLayout &layer : plan->params)
    for (const TensorSlot &slot : layer.slots)
      store_->SetParamPointer(slot.id, staging_[0].data() + slot.staged);
  store_->InitializeRange(seed, mine_.offset, mine_.offset + mine_.size, shard_.data());
  const std::vector<ParamDecl> &decls = store_->decls();
  for (const TensorSlot &slot : plan->persistent.slots) {
    const ParamDecl &d = decls[size_t(slot.id)];
    float *whole = persistent_.data() + slot.staged;
    store_->InitializeRange(seed, d.offset, d.offset + d.numel, whole);
    store_->SetParamPointer(slot.id, whole);
  }
}

ParameterPartition::~ParameterPartition() {
  (void)Drain();
}

void ParameterPartition::Gather(const StagingLayout &layout, float *dst,
                                std::vector<std::unique_ptr<Work>> *works) {
  for (const Segment &segment : layout.segments)
    layout_.ForEachOwner(segment.begin, segment.end,
                         [&](int64_t owner, int64_t begin, int64_t end) {
                           float *piece = dst + segment.staged + (begin - segment.begin);
                           if (owner == comm_->rank())
                             std::memcpy(piece, shard_.data() + (begin - mine_.offset),
                                         size_t(end - begin) * sizeof(float));
                           if (comm_->size() > 1)
                             works->push_back(comm_->Broadcast(piece, end - begin, owner));
                         });
}

Status ParameterPartition::WaitStaged(Staged *staged) {
  Status first;
  for (auto &work : staged->works) {
    Status st = work->Wait();
    if (!st.ok() && first.ok()) first = std::move(st);
  }
  staged->works.clear();
  if (!first.ok()) staged->layer = -1;
  return first;
}

Status ParameterPartition::Acquire(size_t layer, int64_t next) {
  const bool two = staging_[1].data() != nullptr;
  int buffer = -1;
  for (int b = 0; b < (two ? 2 : 1); ++b)
    if (staged_[b].layer == int64_t(layer)) buffer = b;
  if (buffer < 0) {
    buffer = two ? current_ ^ 1 : 0;
    DST_RETURN_IF_ERROR(WaitStaged(&staged_[buffer]));
    staged_[buffer].layer = int64_t(layer);
    Gather(plan_->params[layer], staging_[buffer].data(), &staged_[buffer].works);
  }
  DST_RETURN_IF_ERROR(WaitStaged(&staged_[buffer]));
  current_ = buffer;
  for (const TensorSlot &slot : plan_->params[layer].slots)
    store_->SetParamPointer(slot.id, staging_[buffer].data() + slot.staged);

  // Prefetch the next layer into the other buffer (its layer has finished).
  if (!two || next < 0 || next == int64_t(layer)) return Status::Ok();
  Staged &other = staged_[buffer ^ 1];
  if (other.layer == next || plan_->params[size_t(next)].size > prefetch_elements_)
    return Status::Ok();
  DST_RETURN_IF_ERROR(WaitStaged(&other));
  other.layer = next;
  Gather(plan_->params[size_t(next)], staging_[buffer ^ 1].data(), &other.works);
  return Status::Ok();
}

Status ParameterPartition::Drain() {
  Status a = WaitStaged(&staged_[0]);
  Status b = WaitStaged(&staged_[1]);
  return a.ok() ? b : a;
}

Status ParameterPartition::Forget() {
  Status st = Drain();
  staged_[0].layer = staged_[1].layer = -1;
  return st;
}

Status ParameterPartition::ShardChanged() {
  DST_RETURN_IF_ERROR(Forget());
  if (plan_->persistent.size == 0) return Status::Ok();
  // Each owner contributes its pieces, zeros elsewhere: a sum over disjoint
  // pieces is exact, so one all-reduce refreshes every persistent tensor.
  persistent_.zero();
  for (const Segment &segment : plan_->persistent.segments)
    layout_.ForEachOwner(
        segment.begin, segment.end, [&](int64_t owner, int64_t begin, int64_t end) {
          if (owner != comm_->rank()) return;
          std::memcpy(persistent_.data() + segment.staged + (begin - segment.begin),
                      shard_.data() + (begin - mine_.offset), size_t(end - begin) * sizeof(float));
        });
  if (comm_->size() == 1) return Status::Ok();
  return comm_->AllReduceSum(persistent_.data(), plan_->persistent.size)->Wait();
}

Status ParameterPartition::Read(int id, float *out) {
  const ParamDecl &d = store_->decls()[size_t(id)];
  for (const TensorSlot &slot : plan_->persistent.slots)
    if (slot.id == id) {
      std::memcpy(out, persistent_.data() + slot.staged, size_t(d.numel) * sizeof(float));
      return Status::Ok();
    }
  std::vector<std::unique_ptr<Work>> works;
  Gather(StagingLayout{{{d.offset, d.offset + d.numel, 0}}, {{id, 0}}, d.numel}, out, &works);
  Status first;
  for (auto &work : works) {
    Status st = work->Wait();
    if (!st.ok() && first.ok()) first = std::move(st);
  }
  return first;
}

Status ParameterPartition::Write(int id, const float *in) {
  DST_RETURN_IF_ERROR(Forget());
  const ParamDecl &d = store_->decls()[size_t(id)];
  const int64_t lo = std::max(d.offset, mine_.offset);
  const int64_t hi = std::min(d.offset + d.numel, mine_.offset + mine_.size);
  if (lo < hi)
    std::memcpy(shard_.data() + (lo - mine_.offset), in + (lo - d.offset),
                size_t(hi - lo) * sizeof(float));
  for (const TensorSlot &slot : plan_->persistent.slots)
    if (slot.id == id)
      std::memcpy(persistent_.data() + slot.staged, in, size_t(d.numel) * sizeof(float));
  return Status::Ok();
}

}  // namespace dst
