#include "core/zero/grad_partition.h"

#include <algorithm>
#include <cstring>

namespace dst {

GradientPartition::GradientPartition(const PartitionPlan *plan, const ShardLayout &layout,
                                     Communicator *comm, ParamStore<float> *store,
                                     MemoryTracker *tracker, const GradPartitionOptions &options,
                                     StepPlacement placement)
    : plan_(plan),
      layout_(layout),
      comm_(comm),
      store_(store),
      options_(options),
      tracker_(tracker),
      ops_(placement),
      mine_(layout.Shard(comm->rank())),
      shard_(tracker, MemoryCategory::kGradients, options.storage, layout.shard_size(),
             placement.memory),
      shared_(tracker, MemoryCategory::kCommunication, size_t(plan->shared.size),
              placement.memory) {
  if (options_.codec) options_.wire = StorageType::kFp32;  // the codec reads fp32 values
  const auto comm_category = MemoryCategory::kCommunication;
  const size_t staging = size_t(plan->max_grad_staging);
  MemoryResource *memory = placement.memory;
  staging_[0] = Buffer<float>(tracker, comm_category, staging, memory);
  if (options_.double_buffer) staging_[1] = Buffer<float>(tracker, comm_category, staging, memory);
  if (options_.wire != StorageType::kFp32 && comm->size() > 1) {
    for (int b = 0; b < 2; ++b)
      if (staging_[b].data())
        wire_[b] = FlatBuffer(tracker, comm_category, options_.wire, int64_t(staging), memory);
    wire_[kSharedBuffer] =
        FlatBuffer(tracker, comm_category, options_.wire, plan->shared.size, memory);
  }
  // Shared gradients stay in their region for good.
  for (const TensorSlot &slot : plan->shared.slots)
    store_->SetGradPointer(slot.id, shared_.data() + slot.staged);
  PointAtStaging();
  if (options_.codec && comm->size() > 1) {
    int64_t piece = std::max(plan->max_grad_staging, plan->shared.size);
    if (options_.bucket_elements > 0) piece = std::min(piece, options_.bucket_elements);
    piece = std::min(piece, layout.shard_size());
    sparse_ = std::make_unique<SparseReduceScatter>(*options_.codec, comm, layout, piece, tracker);
  }
  int64_t step = 0;
  for (const StagingLayout &layer : plan->grads) {
    step_offset_.push_back(step);
    step += layer.size;
  }
}

void GradientPartition::PointAtStaging() {
  for (const StagingLayout &layer : plan_->grads)
    for (const TensorSlot &slot : layer.slots)
      store_->SetGradPointer(slot.id, staging_[0].data() + slot.staged);
}

GradientPartition::~GradientPartition() {
  (void)Wait(-1);
}

Status GradientPartition::Zero() {
  Status st = Wait(-1);
  shard_.zero();
  if (options_.once_per_step) {
    const int64_t total = step_offset_.empty() ? 0 : step_offset_.back() + plan_->grads.back().size;
    step_ = Buffer<float>(tracker_, MemoryCategory::kGradients, size_t(total),
                          ops_.memory());  // zeroed
    if (options_.wire != StorageType::kFp32 && comm_->size() > 1)
      wire_[kStepBuffer] =
          FlatBuffer(tracker_, MemoryCategory::kCommunication, options_.wire, total, ops_.memory());
    shared_.zero();
    for (size_t layer = 0; layer < plan_->grads.size(); ++layer)
      for (const TensorSlot &slot : plan_->grads[layer].slots)
        store_->SetGradPointer(slot.id, step_.data() + step_offset_[layer] + slot.staged);
  }
  return st;
}

Status GradientPartition::BeforeBackward(size_t layer) {
  if (options_.once_per_step) return Status::Ok();  // the step buffer accumulates
  // The first layer of a backward pass (the last one) starts the shared sums.
  if (layer + 1 == plan_->grads.size()) shared_.zero();
  Status st = Wait(current_);  // the buffer is free once waited on, even after an error
  const StagingLayout &staged = plan_->grads[layer];
  float *base = staging_[current_].data();
  if (staged.size > 0) ops_.ZeroFloats(base, staged.size);
  for (const TensorSlot &slot : staged.slots) store_->SetGradPointer(slot.id, base + slot.staged);
  return st;
}

Status GradientPartition::AfterBackward(size_t layer) {
  if (options_.once_per_step) {
    if (!final_pass_) return Status::Ok();
    float *base = step_.data() + step_offset_[layer];
    for (const Segment &segment : plan_->grads[layer].segments)
      Launch(segment, base, kStepBuffer, step_offset_[layer]);
    for (const Segment &segment : plan_->shared_after[layer])
      Launch(segment, shared_.data(), kSharedBuffer);
    return Status::Ok();
  }
  float *base = staging_[current_].data();
  for (const Segment &segment : plan_->grads[layer].segments) Launch(segment, base, current_);
  for (const Segment &segment : plan_->shared_after[layer])
    Launch(segment, shared_.data(), kSharedBuffer);
  if (layer == 0 || !options_.double_buffer) return Wait(-1);
  current_ ^= 1;
  return Status::Ok();
}

Status GradientPartition::Drain() {
  Status st = Wait(-1);
  if (options_.once_per_step && step_.data()) {  // reduced: the step buffer goes
    PointAtStaging();
    step_ = Buffer<float>();
    wire_[kStepBuffer] = FlatBuffer();
  }
  return st;
}

void GradientPartition::AddToShard(int64_t begin, const void *data, int64_t count) {
  void *dst = shard_.at(begin - mine_.offset);
  if (options_.wire == StorageType::kFp32)
    ops_.AddInto(shard_.type(), static_cast<const float *>(data), dst, count);
  else if (shard_.type() == StorageType::kFp32)  // fp32 training, 16-bit wire
    ops_.AddWideInto(options_.wire, data, static_cast<float *>(dst), count);
  else
    ops_.SumInto(shard_.type(), dst, data, count);
}

void GradientPartition::Launch(const Segment &segment, float *base, int buffer,
                               int64_t wire_offset) {
  const float *staged = base + segment.staged;
  if (comm_->size() == 1) {  // the whole buffer is this rank's shard: no collective
    ops_.AddInto(shard_.type(), staged, shard_.at(segment.begin), segment.size());
    if (final_pass_ && on_final_) on_final_(segment.begin, segment.size());
    return;
  }
  const bool wide_wire = options_.wire == StorageType::kFp32;
  if (!wide_wire)
    ops_.Narrow(options_.wire, staged, wire_[buffer].at(wire_offset + segment.staged),
                segment.size());
  const int64_t bucket = options_.bucket_elements > 0 ? options_.bucket_elements : segment.size();
  layout_.ForEachOwner(segment.begin, segment.end, [&](int64_t owner, int64_t begin, int64_t end) {
    for (int64_t x = begin; x < end; x += bucket) {
      const int64_t count = std::min(bucket, end - x);
      const int64_t at = segment.staged + (x - segment.begin);
      if (sparse_ && compressed_) {
        pending_.push_back({sparse_->Launch(base + at, x, count, owner), base + at, x, count,
                            buffer, owner == comm_->rank(), final_pass_});
        continue;
      }
      if (sparse_) sparse_->VelocityInPlace(base + at, x, count);  // the warm-up
      void *data = wide_wire ? static_cast<void *>(base + at) : wire_[buffer].at(wire_offset + at);
      pending_.push_back({ReduceSum(*comm_, options_.wire, data, count, owner), data, x, count,
                          buffer, owner == comm_->rank(), final_pass_});
    }
  });
}

Status GradientPartition::Wait(int buffer) {
  Status first;
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending &p = pending_[i];
    if (buffer >= 0 && p.buffer != buffer) {
      if (kept != i) pending_[kept] = std::move(p);
      ++kept;
      continue;
    }
    Status st = ops_.Await(std::move(p.work), "the gradient reduction to their owners");
    if (st.ok() && p.mine) AddToShard(p.begin, p.data, p.count);
    if (st.ok() && p.mine && p.final && on_final_) on_final_(p.begin, p.count);
    if (!st.ok() && first.ok()) first = std::move(st);
  }
  pending_.erase(pending_.begin() + std::ptrdiff_t(kept), pending_.end());
  return first;
}

}  // namespace dst
