#include "core/zero/sparse_reduce_scatter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace dst {
namespace {

// Each piece takes two tags (its size word, its payload) from a range of its
// own, so that a piece's messages never match another's.
constexpr uint32_t kTagBase = 0x5c000000u;
constexpr uint32_t kTagSpan = 0x00ffffffu;

uint32_t SizeTag(uint32_t sequence) {
  return kTagBase + 2 * (sequence % (kTagSpan / 2));
}
uint32_t PayloadTag(uint32_t sequence) {
  return SizeTag(sequence) + 1;
}

Status WaitEach(std::vector<std::unique_ptr<Work>> *works) {
  Status first;
  for (std::unique_ptr<Work> &w : *works) {
    if (!w) continue;
    Status st = w->Wait();
    if (!st.ok() && first.ok()) first = std::move(st);
  }
  works->clear();
  return first;
}

}  // namespace

// The sender's side: the payload (and its size word) until the sends complete.
class SparseReduceScatter::SenderWork final : public Work {
 public:
  Buffer<uint8_t> payload;
  uint32_t size_word = 0;
  std::vector<std::unique_ptr<Work>> sends;

  Status Wait() override {
    if (!done_) {
      status_ = WaitEach(&sends);
      done_ = true;
    }
    return status_;
  }
  bool Test() override {
    for (auto &s : sends)
      if (s && !s->Test()) return false;
    return true;
  }
  ~SenderWork() override { (void)Wait(); }

 private:
  bool done_ = false;
  Status status_;
};

// The owner's side: every peer's size word and payload, summed on Wait.
class SparseReduceScatter::OwnerWork final : public Work {
 public:
  SparseReduceScatter *reducer = nullptr;
  float *data = nullptr;
  int64_t count = 0;
  uint32_t sequence = 0;
  std::vector<uint32_t> sizes;               // [world] bytes (variable sizes)
  std::vector<Buffer<uint8_t>> payloads;     // [world] (own: empty)
  std::vector<std::unique_ptr<Work>> recvs;  // the posted receives

  Status Wait() override {
    if (!done_) {
      status_ = reducer->Collect(this);
      done_ = true;
    }
    return status_;
  }
  bool Test() override { return done_; }
  ~OwnerWork() override {
    if (!done_) (void)WaitEach(&recvs);  // never read: an error path drains
  }

 private:
  bool done_ = false;
  Status status_;
};

SparseReduceScatter::SparseReduceScatter(const CodecOptions &codec, Communicator *comm,
                                         const ShardLayout &layout, int64_t max_piece,
                                         MemoryTracker *tracker)
    : codec_(codec),
      comm_(comm),
      layout_(layout),
      tracker_(tracker),
      mine_(layout.Shard(comm->rank())) {
  const size_t piece = size_t(std::max<int64_t>(1, max_piece));
  residual_ = Buffer<float>(tracker, MemoryCategory::kOptimizerState,
                            size_t(layout.padded - layout.shard_size()));
  if (codec_.momentum_correction) {
    velocity_ = Buffer<float>(tracker, MemoryCategory::kOptimizerState, size_t(layout.padded));
    next_ = Buffer<float>(tracker, MemoryCategory::kCommunication, piece);
  }
  value_ = Buffer<float>(tracker, MemoryCategory::kCommunication, piece);
  decoded_ = Buffer<float>(tracker, MemoryCategory::kCommunication, piece);
  sum_ = Buffer<float>(tracker, MemoryCategory::kCommunication, piece);
  order_ = Buffer<uint32_t>(tracker, MemoryCategory::kCommunication, piece);
}

float *SparseReduceScatter::ResidualOf(int64_t begin) {
  // The residual skips this rank's shard: ranges above it move down by one shard.
  return residual_.data() + (begin < mine_.offset ? begin : begin - mine_.size);
}

void SparseReduceScatter::AppendOwnState(OwnState *out) {
  AppendOwnBuffer("grad_compression.residual", residual_, out);
  AppendOwnBuffer("grad_compression.velocity", velocity_, out);
}

void SparseReduceScatter::ResetOwnState() {
  ZeroOwnBuffer(residual_);
  ZeroOwnBuffer(velocity_);
}

void SparseReduceScatter::VelocityInPlace(float *data, int64_t begin, int64_t count) {
  if (!velocity_.data()) return;
  float *velocity = velocity_.data() + begin;
  NextVelocity(codec_, velocity, data, data, count);
  if (std::all_of(data, data + count, [](float x) { return std::isfinite(x); }))
    std::memcpy(velocity, data, size_t(count) * sizeof(float));
}

std::unique_ptr<Work> SparseReduceScatter::Launch(float *data, int64_t begin, int64_t count,
                                                  int64_t owner) {
  const uint32_t sequence = sequence_++;
  if (count > int64_t(value_.size()))
    return std::make_unique<DoneWork>(InternalError(
        "gradient_compression: a piece of " + std::to_string(count) +
        " elements is larger than the " + std::to_string(value_.size()) + " planned for"));
  const int64_t fixed = FixedPayloadBytes(codec_, count);
  const int64_t world = comm_->size(), rank = comm_->rank();
  float *velocity = velocity_.data() ? velocity_.data() + begin : nullptr;
  if (velocity) {  // momentum correction: data becomes the next velocity
    NextVelocity(codec_, velocity, data, next_.data(), count);
    std::memcpy(data, next_.data(), size_t(count) * sizeof(float));
  }
  if (owner == rank) {
    // The owner's own velocity is applied whole, as if every entry were
    // sent: top-k's masking zeroes it (1-bit/2-bit keep it); a non-finite
    // piece (a skipped step) leaves it as it was.
    if (velocity && std::all_of(data, data + count, [](float x) { return std::isfinite(x); }))
      KeepVelocity(codec_, data, data, velocity, count);
    auto work = std::make_unique<OwnerWork>();
    work->reducer = this;
    work->data = data;
    work->count = count;
    work->sequence = sequence;
    work->sizes.assign(size_t(world), uint32_t(std::max<int64_t>(fixed, 0)));
    work->payloads.resize(size_t(world));
    for (int64_t peer = 0; peer < world; ++peer) {
      if (peer == rank) continue;
      if (fixed < 0) {  // the size word now, the payload once it is known
        work->recvs.push_back(comm_->Recv(&work->sizes[size_t(peer)], 4, peer, SizeTag(sequence)));
      } else {
        work->payloads[size_t(peer)] =
            Buffer<uint8_t>(tracker_, MemoryCategory::kCommunication, size_t(fixed));
        work->recvs.push_back(
            comm_->Recv(work->payloads[size_t(peer)].data(), fixed, peer, PayloadTag(sequence)));
      }
    }
    return work;
  }
  // A sender: value = data + residual, encoded; residual = what was not sent.
  float *value = value_.data();
  float *residual = ResidualOf(begin);
  bool finite = true;
  for (int64_t i = 0; i < count; ++i) {
    value[i] = data[i] + residual[i];
    finite &= std::isfinite(value[i]);
  }
  auto work = std::make_unique<SenderWork>();
  work->payload = Buffer<uint8_t>(tracker_, MemoryCategory::kCommunication,
                                  size_t(MaxPayloadBytes(codec_, count)));
  const int64_t bytes =
      EncodeGradient(codec_, value, count, work->payload.data(), decoded_.data(), order_.data());
  if (finite) {
    for (int64_t i = 0; i < count; ++i) residual[i] = value[i] - decoded_[size_t(i)];
    if (velocity) KeepVelocity(codec_, next_.data(), decoded_.data(), velocity, count);
  }
  if (fixed < 0) {
    work->size_word = uint32_t(bytes);
    work->sends.push_back(comm_->Send(&work->size_word, 4, owner, SizeTag(sequence)));
  }
  work->sends.push_back(comm_->Send(work->payload.data(), bytes, owner, PayloadTag(sequence)));
  ++totals_.buckets;
  totals_.dense_bytes += 4 * count;
  totals_.payload_bytes += bytes + (fixed < 0 ? 4 : 0);
  return work;
}

Status SparseReduceScatter::Collect(OwnerWork *work) {
  const int64_t world = comm_->size(), rank = comm_->rank();
  DST_RETURN_IF_ERROR(WaitEach(&work->recvs));
  const int64_t max_payload = MaxPayloadBytes(codec_, work->count);
  if (FixedPayloadBytes(codec_, work->count) < 0) {  // the payloads, now that their sizes are known
    for (int64_t peer = 0; peer < world; ++peer) {
      if (peer == rank) continue;
      const int64_t bytes = work->sizes[size_t(peer)];
      if (bytes > max_payload || bytes % 4 != 0)
        return InternalError("gradient_compression: rank " + std::to_string(peer) +
                             " announced a payload of " + std::to_string(bytes) +
                             " bytes for a piece of " + std::to_string(work->count) +
                             " elements (at most " + std::to_string(max_payload) +
                             "); every rank must run the same gradient_compression settings");
      work->payloads[size_t(peer)] =
          Buffer<uint8_t>(tracker_, MemoryCategory::kCommunication, size_t(bytes));
      work->recvs.push_back(comm_->Recv(work->payloads[size_t(peer)].data(), bytes, peer,
                                        PayloadTag(work->sequence)));
    }
    DST_RETURN_IF_ERROR(WaitEach(&work->recvs));
  }
  // In rank order, this rank's own values at its place.
  float *sum = sum_.data();
  const int64_t n = work->count;
  std::fill(sum, sum + n, 0.0f);
  for (int64_t peer = 0; peer < world; ++peer) {
    if (peer == rank) {
      for (int64_t i = 0; i < n; ++i) sum[i] += work->data[i];
      continue;
    }
    const Buffer<uint8_t> &payload = work->payloads[size_t(peer)];
    totals_.gathered_bytes += int64_t(payload.size());
    DST_RETURN_IF_ERROR(DecodeAddGradient(codec_, payload.data(), int64_t(payload.size()), n, sum));
  }
  std::memcpy(work->data, sum, size_t(n) * sizeof(float));
  work->payloads.clear();
  return Status::Ok();
}

}  // namespace dst
