#include "core/zero/param_partition.h"

#include <algorithm>
#include <cstring>

namespace dst {

namespace {
constexpr int64_t kInitChunk = 4096;  // elements initialised at a time before narrowing
}

ParameterPartition::ParameterPartition(const PartitionPlan *plan, const ShardLayout &layout,
                                       Communicator *comm, ParamStore<float> *store,
                                       MemoryTracker *tracker, uint64_t seed,
                                       int64_t prefetch_elements, StorageType storage)
    : plan_(plan),
      layout_(layout),
      comm_(comm),
      store_(store),
      mine_(layout.Shard(comm->rank())),
      prefetch_elements_(prefetch_elements),
      shard_(tracker, MemoryCategory::kParameters, storage, layout.shard_size()),
      persistent_(tracker, MemoryCategory::kParameters, storage, plan->persistent.size) {
  const auto comm_category = MemoryCategory::kCommunication;
  const int64_t staging = plan->max_param_staging;
  const int buffers = prefetch_elements_ > 0 ? 2 : 1;
  for (int b = 0; b < buffers; ++b) {
    staging_[b] = FlatBuffer(tracker, comm_category, storage, staging);
    if (Wide()) working_[b] = Buffer<float>(tracker, comm_category, size_t(staging));
  }
  if (Wide()) persistent_work_ = Buffer<float>(tracker, comm_category, size_t(persistent_.size()));
  // Until a layer is gathered its tensors point into the working buffer, so
  // that a pass cut short by an error reads only memory this object owns.
  for (const StagingLayout &layer : plan->params)
    for (const TensorSlot &slot : layer.slots)
      store_->SetParamPointer(slot.id, Working(0) + slot.staged);

  // Initialisation is a pure function of the element: the shard and the
  // persistent tensors hold what the single-rank run would (rounded to the
  // storage type).
  std::vector<float> chunk(static_cast<size_t>(kInitChunk), 0.0f);
  auto init = [&](int64_t begin, int64_t end, FlatBuffer &dst, int64_t at) {
    for (int64_t b = begin; b < end; b += kInitChunk) {
      const int64_t n = std::min(kInitChunk, end - b);
      store_->InitializeRange(seed, b, b + n, chunk.data());
      Narrow(storage, chunk.data(), dst.at(at + (b - begin)), n);
    }
  };
  init(mine_.offset, mine_.offset + mine_.size, shard_, 0);
  const std::vector<ParamDecl> &decls = store_->decls();
  for (const TensorSlot &slot : plan->persistent.slots) {
    const ParamDecl &d = decls[size_t(slot.id)];
    init(d.offset, d.offset + d.numel, persistent_, slot.staged);
    store_->SetParamPointer(slot.id, Wide() ? persistent_work_.data() + slot.staged
                                            : static_cast<float *>(persistent_.at(slot.staged)));
  }
  WidenPersistent();
}

ParameterPartition::~ParameterPartition() {
  (void)Drain();
}

void ParameterPartition::WidenPersistent() {
  if (Wide()) Widen(storage(), persistent_.at(0), persistent_work_.data(), persistent_.size());
}

void ParameterPartition::Gather(const StagingLayout &layout, void *dst,
                                std::vector<std::unique_ptr<Work>> *works) {
  const size_t bytes = ElementBytes(storage());
  for (const Segment &segment : layout.segments)
    layout_.ForEachOwner(
        segment.begin, segment.end, [&](int64_t owner, int64_t begin, int64_t end) {
          uint8_t *piece = static_cast<uint8_t *>(dst) +
                           size_t(segment.staged + (begin - segment.begin)) * bytes;
          if (owner == comm_->rank())
            std::memcpy(piece, shard_.at(begin - mine_.offset), size_t(end - begin) * bytes);
          if (comm_->size() > 1)
            works->push_back(Broadcast(*comm_, storage(), piece, end - begin, owner));
        });
}

Status ParameterPartition::WaitStaged(Staged *staged) {
  Status first = WaitAll(&staged->works);
  if (!first.ok()) staged->layer = -1;
  return first;
}

Status ParameterPartition::Acquire(size_t layer, int64_t next) {
  const bool two = !staging_[1].empty();
  int buffer = -1;
  for (int b = 0; b < (two ? 2 : 1); ++b)
    if (staged_[b].layer == int64_t(layer)) buffer = b;
  if (buffer < 0) {
    buffer = two ? current_ ^ 1 : 0;
    DST_RETURN_IF_ERROR(WaitStaged(&staged_[buffer]));
    staged_[buffer].layer = int64_t(layer);
    staged_[buffer].widened = false;
    Gather(plan_->params[layer], staging_[buffer].at(0), &staged_[buffer].works);
  }
  DST_RETURN_IF_ERROR(WaitStaged(&staged_[buffer]));
  if (Wide() && !staged_[buffer].widened) {
    Widen(storage(), staging_[buffer].at(0), working_[buffer].data(), plan_->params[layer].size);
    staged_[buffer].widened = true;
  }
  current_ = buffer;
  for (const TensorSlot &slot : plan_->params[layer].slots)
    store_->SetParamPointer(slot.id, Working(buffer) + slot.staged);

  // Prefetch the next layer into the other buffer (its layer has finished).
  if (!two || next < 0 || next == int64_t(layer)) return Status::Ok();
  Staged &other = staged_[buffer ^ 1];
  if (other.layer == next || plan_->params[size_t(next)].size > prefetch_elements_)
    return Status::Ok();
  DST_RETURN_IF_ERROR(WaitStaged(&other));
  other.layer = next;
  other.widened = false;
  Gather(plan_->params[size_t(next)], staging_[buffer ^ 1].at(0), &other.works);
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
  // pieces is exact (x + 0 = x in every storage type), so one all-reduce
  // refreshes every persistent tensor.
  const size_t bytes = ElementBytes(storage());
  persistent_.zero();
  for (const Segment &segment : plan_->persistent.segments)
    layout_.ForEachOwner(
        segment.begin, segment.end, [&](int64_t owner, int64_t begin, int64_t end) {
          if (owner != comm_->rank()) return;
          std::memcpy(persistent_.at(segment.staged + (begin - segment.begin)),
                      shard_.at(begin - mine_.offset), size_t(end - begin) * bytes);
        });
  if (comm_->size() > 1)
    DST_RETURN_IF_ERROR(
        AllReduceSum(*comm_, storage(), persistent_.at(0), plan_->persistent.size)->Wait());
  WidenPersistent();
  return Status::Ok();
}

Status ParameterPartition::Read(int id, float *out) {
  const ParamDecl &d = store_->decls()[size_t(id)];
  for (const TensorSlot &slot : plan_->persistent.slots)
    if (slot.id == id) {
      Widen(storage(), persistent_.at(slot.staged), out, d.numel);
      return Status::Ok();
    }
  std::vector<uint8_t> wide;  // the gathered tensor in its storage type (16 bits only)
  void *dst = out;
  if (Wide()) {
    wide.resize(size_t(d.numel) * ElementBytes(storage()));
    dst = wide.data();
  }
  std::vector<std::unique_ptr<Work>> works;
  Gather(StagingLayout{{{d.offset, d.offset + d.numel, 0}}, {{id, 0}}, d.numel}, dst, &works);
  DST_RETURN_IF_ERROR(WaitAll(&works));
  if (Wide()) Widen(storage(), wide.data(), out, d.numel);
  return Status::Ok();
}

Status ParameterPartition::Write(int id, const float *in) {
  DST_RETURN_IF_ERROR(Forget());
  const ParamDecl &d = store_->decls()[size_t(id)];
  const int64_t lo = std::max(d.offset, mine_.offset);
  const int64_t hi = std::min(d.offset + d.numel, mine_.offset + mine_.size);
  if (lo < hi) Narrow(storage(), in + (lo - d.offset), shard_.at(lo - mine_.offset), hi - lo);
  for (const TensorSlot &slot : plan_->persistent.slots)
    if (slot.id == id) {
      Narrow(storage(), in, persistent_.at(slot.staged), d.numel);
      if (Wide())
        Widen(storage(), persistent_.at(slot.staged), persistent_work_.data() + slot.staged,
              d.numel);
    }
  return Status::Ok();
}

}  // namespace dst
