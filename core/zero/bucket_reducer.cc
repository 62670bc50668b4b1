#include "core/zero/bucket_reducer.h"

#include <algorithm>

namespace dst {

BucketReducer::BucketReducer(const ShardLayout &layout, int stage, Communicator *comm, void *grads,
                             StorageType storage, StorageType wire, int64_t bucket_elements,
                             MemoryTracker *tracker, const CodecOptions *codec,
                             StepPlacement placement)
    : layout_(layout),
      comm_(comm),
      grads_(grads),
      storage_(storage),
      wire_type_(wire),
      ops_(placement) {
  bucket_elements = std::max<int64_t>(1, bucket_elements);
  int64_t end = layout_.padded;
  while (end > 0) {
    const int64_t begin = std::max<int64_t>(0, end - bucket_elements);
    GradBucket bucket{begin, end, -1};
    if (stage >= 1) {
      // A stage-1 bucket never straddles two shards: it is reduced to one owner.
      const int64_t owner = layout_.OwnerOf(end - 1);
      bucket.begin = std::max(begin, layout_.Shard(owner).offset);
      bucket.root = owner;
    }
    buckets_.push_back(bucket);
    end = bucket.begin;
  }
  if (codec != nullptr && comm_->size() > 1) {
    compressor_ = std::make_unique<GradCompressor>(*codec, comm_, storage_, layout_.padded,
                                                   bucket_elements, tracker);
    if (!ops_.on_host())
      staged_.assign(size_t(GradCompressor::kSlots),
                     std::vector<uint8_t>(size_t(std::min(bucket_elements, layout_.padded)) *
                                          ElementBytes(storage_)));
    if (codec->warmup_steps == 0) return;  // never reduced plainly
  }
  if (storage_ != wire_type_ && comm_->size() > 1)
    for (FlatBuffer &w : wire_)
      w = FlatBuffer(tracker, MemoryCategory::kCommunication, wire_type_,
                     std::min(bucket_elements, layout_.padded), placement.memory);
}

BucketReducer::~BucketReducer() {
  (void)Reset();
}

Status BucketReducer::Reset() {
  Status first;
  while (!pending_.empty()) {
    Status st = WaitOldest();
    if (!st.ok() && first.ok()) first = std::move(st);
  }
  next_ = 0;
  return first;
}

Status BucketReducer::Launch(size_t b) {
  const GradBucket &bucket = buckets_[b];
  const int64_t n = bucket.end - bucket.begin;
  void *data = static_cast<uint8_t *>(grads_) + size_t(bucket.begin) * ElementBytes(storage_);
  if (compressor_ && compressed_) {
    if (pending_.size() >= size_t(GradCompressor::kSlots)) DST_RETURN_IF_ERROR(WaitOldest());
    const int slot = next_wire_;
    next_wire_ = (next_wire_ + 1) % GradCompressor::kSlots;
    const void *src = data;
    if (!staged_.empty()) {  // the codec reads host memory
      ops_.Download(staged_[size_t(slot)].data(), data, size_t(n) * ElementBytes(storage_));
      src = staged_[size_t(slot)].data();
    }
    Result<std::unique_ptr<Work>> work = compressor_->Launch(slot, src, bucket.begin, n);
    if (!work.ok()) return work.status();
    pending_.push_back({std::move(work).value(), b, slot, true});
    return Status::Ok();
  }
  if (compressor_ && compressor_->codec().momentum_correction) {
    // The warm-up: momentum correction's velocity reduced plainly (staged_
    // is free: no compressed bucket is in flight in a warm-up step).
    if (!staged_.empty()) {
      std::vector<uint8_t> &host = staged_[0];
      ops_.Download(host.data(), data, size_t(n) * ElementBytes(storage_));
      compressor_->VelocityInPlace(host.data(), bucket.begin, n);
      ops_.Upload(data, host.data(), size_t(n) * ElementBytes(storage_));
    } else {
      compressor_->VelocityInPlace(data, bucket.begin, n);
    }
  }
  if (storage_ == wire_type_) {
    pending_.push_back({bucket.root < 0 ? AllReduceSum(*comm_, storage_, data, n)
                                        : ReduceSum(*comm_, storage_, data, n, bucket.root),
                        b, -1, false});
    return Status::Ok();
  }
  // Converted for the wire (16-bit storage widened to fp32, or fp32
  // gradients rounded to 16 bits): at most two buckets in flight.
  if (pending_.size() >= 2) DST_RETURN_IF_ERROR(WaitOldest());
  const int w = next_wire_;
  next_wire_ ^= 1;
  void *wire = wire_[w].at(0);
  if (storage_ == StorageType::kFp32)
    ops_.Narrow(wire_type_, static_cast<const float *>(data), wire, n);
  else
    ops_.Widen(storage_, data, static_cast<float *>(wire), n);
  pending_.push_back({bucket.root < 0 ? AllReduceSum(*comm_, wire_type_, wire, n)
                                      : ReduceSum(*comm_, wire_type_, wire, n, bucket.root),
                      b, w, false});
  return Status::Ok();
}

Status BucketReducer::WaitOldest() {
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  DST_RETURN_IF_ERROR(ops_.Await(std::move(p.work), "the gradient bucket reduction"));
  const GradBucket &bucket = buckets_[p.bucket];
  if (bucket.root >= 0 && bucket.root != comm_->rank()) return Status::Ok();  // scratch here
  if (p.wire >= 0) DST_RETURN_IF_ERROR(Unwire(p));
  if (on_reduced_) on_reduced_(bucket.begin, bucket.end - bucket.begin);
  return Status::Ok();
}

Status BucketReducer::Unwire(const Pending &p) {
  const GradBucket &bucket = buckets_[p.bucket];
  void *data = static_cast<uint8_t *>(grads_) + size_t(bucket.begin) * ElementBytes(storage_);
  const int64_t n = bucket.end - bucket.begin;
  if (p.compressed && !staged_.empty()) {  // the sum on the host, then up
    std::vector<uint8_t> &host = staged_[size_t(p.wire)];
    DST_RETURN_IF_ERROR(compressor_->Complete(p.wire, host.data(), n));
    ops_.Upload(data, host.data(), size_t(n) * ElementBytes(storage_));
    return Status::Ok();
  }
  if (p.compressed) return compressor_->Complete(p.wire, data, n);
  if (storage_ == StorageType::kFp32)
    ops_.Widen(wire_type_, wire_[p.wire].at(0), static_cast<float *>(data), n);
  else
    ops_.Narrow(storage_, static_cast<const float *>(wire_[p.wire].at(0)), data, n);
  return Status::Ok();
}

Status BucketReducer::LaunchAbove(int64_t boundary) {
  if (comm_->size() == 1 || local_) return Status::Ok();  // nothing to reduce
  while (next_ < buckets_.size() && buckets_[next_].begin >= boundary)
    DST_RETURN_IF_ERROR(Launch(next_++));
  return Status::Ok();
}

Status BucketReducer::Finish() {
  if (comm_->size() == 1 || local_) return Status::Ok();
  Status first;
  while (next_ < buckets_.size()) {
    first = Launch(next_++);
    if (!first.ok()) break;
  }
  while (!pending_.empty()) {
    Status st = WaitOldest();
    if (!st.ok() && first.ok()) first = std::move(st);
  }
  return first;
}

}  // namespace dst
