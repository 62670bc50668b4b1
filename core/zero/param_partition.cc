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
                                       int64_t prefetch_elements, StorageType storage,
                                       int64_t resident, StepPlacement placement, bool host_shard)
    : plan_(plan),
      layout_(layout),
      comm_(comm),
      store_(store),
      mine_(layout.Shard(comm->rank())),
      prefetch_elements_(prefetch_elements),
      ops_(placement),
      host_shard_(host_shard && !placement.on_host()),
      shard_(tracker, MemoryCategory::kParameters, storage,
             resident < 0 ? layout.shard_size() : std::min(resident, layout.shard_size()),
             host_shard_ ? nullptr : placement.memory),
      persistent_(tracker, MemoryCategory::kParameters, storage, plan->persistent.size,
                  placement.memory),
      seed_(seed) {
  const auto comm_category = MemoryCategory::kCommunication;
  MemoryResource *memory = placement.memory;
  const int64_t staging = plan->max_param_staging;
  const int buffers = prefetch_elements_ > 0 ? 2 : 1;
  in_place_ = Wide() && comm_->size() == 1 && !host_shard_ && ops_.on_host() &&
              shard_.size() == layout_.shard_size();
  for (int b = 0; b < buffers; ++b) {
    if (!InPlace()) staging_[b] = FlatBuffer(tracker, comm_category, storage, staging, memory);
    if (Wide()) working_[b] = Buffer<float>(tracker, comm_category, size_t(staging), memory);
  }
  if (Wide())
    persistent_work_ = Buffer<float>(tracker, comm_category, size_t(persistent_.size()), memory);
  // Until a layer is gathered its tensors point into the working buffer, so
  // that a pass cut short by an error reads only memory this object owns.
  for (const StagingLayout &layer : plan->params)
    for (const TensorSlot &slot : layer.slots)
      store_->SetParamPointer(slot.id, Working(0) + slot.staged, Bf16Of(0, slot));

  // Initialisation is a pure function of the element: the shard and the
  // persistent tensors hold what the single-rank run would (rounded to the
  // storage type).
  Initialize(mine_.offset, mine_.offset + shard_.size(), shard_, 0,  // the rest: AttachSwap
             host_shard_ ? StorageOps() : ops_);
  const std::vector<ParamDecl> &decls = store_->decls();
  for (const TensorSlot &slot : plan->persistent.slots) {
    const ParamDecl &d = decls[size_t(slot.id)];
    Initialize(d.offset, d.offset + d.numel, persistent_, slot.staged, ops_);
    store_->SetParamPointer(slot.id,
                            Wide() ? persistent_work_.data() + slot.staged
                                   : static_cast<float *>(persistent_.at(slot.staged)),
                            Bf16Copy(persistent_, slot));
  }
  WidenPersistent();
}

ParameterPartition::~ParameterPartition() {
  (void)Drain();
}

void ParameterPartition::Initialize(int64_t begin, int64_t end, FlatBuffer &dst, int64_t at,
                                    const StorageOps &ops) {
  std::vector<float> chunk(static_cast<size_t>(kInitChunk), 0.0f);
  std::vector<uint8_t> narrow(size_t(kInitChunk) * ElementBytes(storage()));
  for (int64_t b = begin; b < end; b += kInitChunk) {
    const int64_t n = std::min(kInitChunk, end - b);
    store_->InitializeRange(seed_, b, b + n, chunk.data());
    Narrow(storage(), chunk.data(), narrow.data(), n);
    ops.Upload(dst.at(at + (b - begin)), narrow.data(), size_t(n) * ElementBytes(storage()));
  }
}

void ParameterPartition::WidenPersistent() {
  if (Wide()) ops_.Widen(storage(), persistent_.at(0), persistent_work_.data(), persistent_.size());
}

Status ParameterPartition::Gather(const StagingLayout &layout, void *dst,
                                  std::vector<std::unique_ptr<Work>> *works, int64_t key) {
  const size_t bytes = ElementBytes(storage());
  Status st = Status::Ok();
  for (const Segment &segment : layout.segments)
    layout_.ForEachOwner(
        segment.begin, segment.end, [&](int64_t owner, int64_t begin, int64_t end) {
          uint8_t *piece = static_cast<uint8_t *>(dst) +
                           size_t(segment.staged + (begin - segment.begin)) * bytes;
          if (owner == comm_->rank() && st.ok())
            st = ReadShard(begin - mine_.offset, end - begin, piece, key);
          if (comm_->size() > 1)
            works->push_back(Broadcast(*comm_, storage(), piece, end - begin, owner));
        });
  return st;
}

Status ParameterPartition::ReadShard(int64_t at, int64_t n, void *dst, int64_t key) {
  const size_t bytes = ElementBytes(storage());
  const int64_t here = std::clamp<int64_t>(shard_.size() - at, 0, n);
  if (here > 0 && host_shard_)
    CopyUp(dst, shard_.at(at), size_t(here) * bytes);
  else if (here > 0)
    ops_.Copy(storage(), shard_.at(at), dst, here);
  if (here == n) return Status::Ok();
  uint8_t *rest = static_cast<uint8_t *>(dst) + size_t(here) * bytes;
  const int64_t begin = (at + here - shard_.size()) * int64_t(bytes);
  const int64_t count = (n - here) * int64_t(bytes);
  if (key >= 0) {  // the layer's window (read ahead, or now)
    const auto [lo, hi] = SwapRange(size_t(key));
    Result<const uint8_t *> window = swap_->Window(key, lo, hi);
    if (!window.ok()) return window.status();
    CopyUp(rest, window.value() + (begin - lo), size_t(count));
    return Status::Ok();
  }
  if (ops_.on_host()) return swap_->Read(begin, count, rest);
  std::vector<uint8_t> host(static_cast<size_t>(count));  // read on the host, then up
  DST_RETURN_IF_ERROR(swap_->Read(begin, count, host.data()));
  CopyUp(rest, host.data(), host.size());
  return Status::Ok();
}

namespace {

// The flat span [lo, hi) of the tensors `params` gathers (empty: 0, 0).
std::pair<int64_t, int64_t> Span(const StagingLayout &params) {
  if (params.segments.empty()) return {0, 0};
  int64_t lo = params.segments.front().begin, hi = params.segments.front().end;
  for (const Segment &s : params.segments) {
    lo = std::min(lo, s.begin);
    hi = std::max(hi, s.end);
  }
  return {lo, hi};
}

// The part of `span` in the swapped range [first, last), from `first`.
std::pair<int64_t, int64_t> SwappedPart(std::pair<int64_t, int64_t> span, int64_t first,
                                        int64_t last) {
  const int64_t lo = std::max(span.first, first), hi = std::min(span.second, last);
  return lo < hi ? std::pair<int64_t, int64_t>{lo - first, hi - first}
                 : std::pair<int64_t, int64_t>{0, 0};
}

}  // namespace

int64_t LargestSwappedShare(const PartitionPlan &plan, const ShardLayout &layout,
                            int64_t resident) {
  int64_t largest = 0;
  for (int64_t r = 0; r < layout.dp; ++r) {
    const ShardInfo shard = layout.Shard(r);
    const int64_t kept = std::min(resident, shard.size);
    for (const StagingLayout &params : plan.params) {
      const auto [lo, hi] =
          SwappedPart(Span(params), shard.offset + kept, shard.offset + shard.size);
      largest = std::max(largest, hi - lo);
    }
  }
  return largest;
}

// Layer `layer`'s share of the swapped part of this rank's shard, in
// elements from its start (empty when it has none).
std::pair<int64_t, int64_t> ParameterPartition::SwappedShare(size_t layer) const {
  return SwappedPart(Span(plan_->params[layer]), mine_.offset + shard_.size(),
                     mine_.offset + mine_.size);
}

std::pair<int64_t, int64_t> ParameterPartition::SwapRange(size_t layer) const {
  const auto [lo, hi] = SwappedShare(layer);
  const int64_t bytes = int64_t(ElementBytes(storage()));
  return {lo * bytes, hi * bytes};
}

Status ParameterPartition::ReadAhead(size_t layer, int64_t next) {
  if (!swap_ || next < 0) return Status::Ok();
  const int64_t step = next >= int64_t(layer) ? 1 : -1;
  const int64_t layers = int64_t(plan_->params.size());
  int64_t l = next;
  for (int64_t i = 0; i + 1 < swap_->windows() && l >= 0 && l < layers; ++i, l += step) {
    const auto [lo, hi] = SwapRange(size_t(l));
    DST_RETURN_IF_ERROR(swap_->Prefetch(l, lo, hi));
  }
  return Status::Ok();
}

Status ParameterPartition::AttachSwap(std::unique_ptr<ParamSwap> swap) {
  swap_ = std::move(swap);
  DST_RETURN_IF_ERROR(BeginShardWrite());
  std::vector<float> chunk(static_cast<size_t>(kInitChunk), 0.0f);
  std::vector<uint8_t> narrow(size_t(kInitChunk) * ElementBytes(storage()));
  for (int64_t at = shard_.size(); at < layout_.shard_size(); at += kInitChunk) {
    const int64_t n = std::min(kInitChunk, layout_.shard_size() - at);
    store_->InitializeRange(seed_, mine_.offset + at, mine_.offset + at + n, chunk.data());
    Narrow(storage(), chunk.data(), narrow.data(), n);
    Status st = WriteShard(at, narrow.data(), n, /*from_host=*/true);
    if (!st.ok()) {
      AbortShardWrite();
      return st;
    }
  }
  return EndShardWrite(0);
}

Status ParameterPartition::WriteShard(int64_t at, const void *src, int64_t n, bool from_host) {
  const size_t bytes = ElementBytes(storage());
  const int64_t here = std::clamp<int64_t>(shard_.size() - at, 0, n);
  if (here > 0 && shard_.at(at) != src) {
    if (host_shard_)  // `src` is the host's too
      std::memcpy(shard_.at(at), src, size_t(here) * bytes);
    else if (from_host)
      ops_.Upload(shard_.at(at), src, size_t(here) * bytes);
    else
      ops_.Copy(storage(), src, shard_.at(at), here);
  }
  if (here == n) return Status::Ok();
  const uint8_t *rest = static_cast<const uint8_t *>(src) + size_t(here) * bytes;
  const int64_t count = (n - here) * int64_t(bytes);
  if (swap_->writing()) return swap_->Append(rest, count);
  return swap_->Write((at + here - shard_.size()) * int64_t(bytes), count, rest);
}

Status ParameterPartition::BeginShardWrite() {
  if (!swap_) return Status::Ok();
  DST_RETURN_IF_ERROR(Forget());
  return swap_->BeginWrite();
}

Status ParameterPartition::EndShardWrite(int64_t step) {
  return swap_ ? swap_->EndWrite(step) : Status::Ok();
}

void ParameterPartition::AbortShardWrite() {
  if (swap_) swap_->AbortWrite();
}

Status ParameterPartition::WaitStaged(Staged *staged) {
  Status first = WaitAll(&staged->works);
  if (!first.ok()) staged->layer = -1;
  return first;
}

Status ParameterPartition::Ready(Staged *staged, size_t layer) {
  if (ops_.order() == nullptr) return WaitStaged(staged);
  const std::string what = "ZeRO-3 gather of layer " + std::to_string(layer) + "'s parameters";
  Status first;
  for (std::unique_ptr<Work> &work : staged->works) {
    Status st = ops_.Await(std::move(work), what);
    if (!st.ok() && first.ok()) first = std::move(st);
  }
  staged->works.clear();
  if (!first.ok()) staged->layer = -1;
  return first;
}

void ParameterPartition::SkipWideningBf16GemmWeights() {
  skip_gemm_weights_ = storage() == StorageType::kBf16;
  for (const StagingLayout &layer : plan_->params)
    for (const TensorSlot &slot : layer.slots)
      store_->SetParamPointer(slot.id, WorkingOf(0, slot), Bf16Of(0, slot));
}

void ParameterPartition::WidenStaged(int b, const StagingLayout &layout) {
  if (!skip_gemm_weights_ && !InPlace()) {
    ops_.Widen(storage(), staging_[b].at(0), working_[b].data(), layout.size);
    return;
  }
  // Each run of tensors adjacent both in the working copy [begin, end) and
  // in their source (from) in one call.
  const size_t bytes = ElementBytes(storage());
  int64_t begin = 0, end = 0;
  const uint8_t *from = nullptr;
  auto widen = [&] {
    if (end > begin) ops_.Widen(storage(), from, working_[b].data() + begin, end - begin);
  };
  for (const TensorSlot &slot : layout.slots) {
    if (LeftNarrow(slot)) continue;
    const auto *src = static_cast<const uint8_t *>(Source(b, slot));
    if (slot.staged != end || from == nullptr || src != from + size_t(end - begin) * bytes) {
      widen();  // a gap: a tensor left narrow, or a jump in the source
      begin = end = slot.staged;
      from = src;
    }
    end = slot.staged + store_->decls()[size_t(slot.id)].numel;
  }
  widen();
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
    if (!InPlace())
      DST_RETURN_IF_ERROR(Gather(plan_->params[layer], staging_[buffer].at(0),
                                 &staged_[buffer].works, int64_t(layer)));
  }
  DST_RETURN_IF_ERROR(Ready(&staged_[buffer], layer));
  if (Wide() && !staged_[buffer].widened) {
    WidenStaged(buffer, plan_->params[layer]);
    staged_[buffer].widened = true;
  }
  current_ = buffer;
  for (const TensorSlot &slot : plan_->params[layer].slots)
    store_->SetParamPointer(slot.id, WorkingOf(buffer, slot), Bf16Of(buffer, slot));

  DST_RETURN_IF_ERROR(ReadAhead(layer, next));
  // Prefetch the next layer into the other buffer (its layer has finished).
  if (!two || next < 0 || next == int64_t(layer) || InPlace()) return Status::Ok();
  Staged &other = staged_[buffer ^ 1];
  if (other.layer == next || plan_->params[size_t(next)].size > prefetch_elements_)
    return Status::Ok();
  DST_RETURN_IF_ERROR(WaitStaged(&other));
  other.layer = next;
  other.widened = false;
  return Gather(plan_->params[size_t(next)], staging_[buffer ^ 1].at(0), &other.works, next);
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
  DST_RETURN_IF_ERROR(RefreshPersistent());
  // The next forward's first layers are read now, behind whatever comes
  // before it (their first gather would otherwise wait for them).
  return ReadAhead(0, 0);
}

Status ParameterPartition::RefreshPersistent() {
  if (plan_->persistent.size == 0) return Status::Ok();
  // Each owner contributes its pieces, zeros elsewhere: a sum over disjoint
  // pieces is exact (x + 0 = x in every storage type), so one all-reduce
  // refreshes every persistent tensor.
  persistent_.zero();
  Status st = Status::Ok();  // a failed read still joins the all-reduce (no peer waits forever)
  for (const Segment &segment : plan_->persistent.segments)
    layout_.ForEachOwner(segment.begin, segment.end,
                         [&](int64_t owner, int64_t begin, int64_t end) {
                           if (owner != comm_->rank() || !st.ok()) return;
                           st = ReadShard(begin - mine_.offset, end - begin,
                                          persistent_.at(segment.staged + (begin - segment.begin)));
                         });
  if (comm_->size() > 1) {
    Status reduced =
        AllReduceSum(*comm_, storage(), persistent_.at(0), plan_->persistent.size)->Wait();
    if (st.ok()) st = reduced;
  }
  DST_RETURN_IF_ERROR(st);
  WidenPersistent();
  return Status::Ok();
}

Status ParameterPartition::Read(int id, float *out) {
  const ParamDecl &d = store_->decls()[size_t(id)];
  for (const TensorSlot &slot : plan_->persistent.slots)
    if (slot.id == id) {
      ops_.WidenToHost(storage(), persistent_.at(slot.staged), out, d.numel);
      return Status::Ok();
    }
  // Gathered in the storage type where the shard lives, then widened to `out`.
  FlatBuffer gathered(nullptr, MemoryCategory::kCommunication, storage(), d.numel, ops_.memory());
  std::vector<std::unique_ptr<Work>> works;
  Status st = Gather(StagingLayout{{{d.offset, d.offset + d.numel, 0}}, {{id, 0}}, d.numel},
                     gathered.at(0), &works);
  DST_RETURN_IF_ERROR(WaitAll(&works));
  DST_RETURN_IF_ERROR(st);
  ops_.WidenToHost(storage(), gathered.at(0), out, d.numel);
  return Status::Ok();
}

Status ParameterPartition::Write(int id, const float *in) {
  DST_RETURN_IF_ERROR(Forget());
  const ParamDecl &d = store_->decls()[size_t(id)];
  const int64_t lo = std::max(d.offset, mine_.offset);
  const int64_t hi = std::min(d.offset + d.numel, mine_.offset + mine_.size);
  if (lo < hi) {
    std::vector<uint8_t> narrow(size_t(hi - lo) * ElementBytes(storage()));
    Narrow(storage(), in + (lo - d.offset), narrow.data(), hi - lo);
    DST_RETURN_IF_ERROR(WriteShard(lo - mine_.offset, narrow.data(), hi - lo, /*from_host=*/true));
  }
  for (const TensorSlot &slot : plan_->persistent.slots)
    if (slot.id == id) {
      std::vector<uint8_t> narrow(size_t(d.numel) * ElementBytes(storage()));
      Narrow(storage(), in, narrow.data(), d.numel);
      ops_.Upload(persistent_.at(slot.staged), narrow.data(), narrow.size());
      if (Wide())
        ops_.Widen(storage(), persistent_.at(slot.staged), persistent_work_.data() + slot.staged,
                   d.numel);
    }
  return Status::Ok();
}

}  // namespace dst
