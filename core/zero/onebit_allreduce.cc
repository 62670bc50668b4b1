#include "core/zero/onebit_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace dst {

namespace {

constexpr uint32_t kTagToServers = 0x1B170001, kTagFromServers = 0x1B170002;

// DeepSpeed's padding unit: size x lcm(size, 8) elements, so that every
// server chunk packs into whole bytes.
int64_t PaddingUnit(int64_t world) {
  return world * std::lcm(world, int64_t(8));
}

int64_t Padded(int64_t numel, int64_t world) {
  const int64_t unit = PaddingUnit(world);
  return (numel + unit - 1) / unit * unit;
}

// One bit per element, set where x >= 0 (and NaN): sign(0) is +1.
inline bool Positive(float x) {
  return !(x < 0.0f);
}

inline float Signed(const uint8_t *bits, int64_t k, float scale) {
  return (bits[k >> 3] >> (k & 7)) & 1 ? scale : -scale;
}

// ||x|| / sqrt(n): the scale every sign of x stands for.
float RootMeanSquare(const float *x, int64_t n) {
  if (n <= 0) return 0.0f;  // an empty tensor
  double squares = 0;
  for (int64_t k = 0; k < n; ++k) squares += double(x[k]) * double(x[k]);
  return float(std::sqrt(squares) / std::sqrt(double(n)));
}

// x [n] into bits (one per element; n a multiple of 8), and what they lose,
// x - scale sign(x), into `error`.
void SignsWithError(const float *x, int64_t n, float scale, float *error, uint8_t *bits) {
  if (n <= 0) return;
  std::memset(bits, 0, size_t(n) / 8);
  for (int64_t k = 0; k < n; ++k) {
    const bool up = Positive(x[k]);
    if (up) bits[k >> 3] |= uint8_t(1u << (k & 7));
    error[k] = x[k] - (up ? scale : -scale);
  }
}

}  // namespace

OneBitAllReduce::OneBitAllReduce(Communicator *comm, std::vector<TensorSpan> tensors,
                                 MemoryTracker *tracker)
    : comm_(comm), tensors_(std::move(tensors)) {
  const int64_t world = comm_->size();
  int64_t errors = 0, servers = 0, largest = 0;
  for (const TensorSpan &t : tensors_) {
    Layout l;
    l.padded = Padded(t.numel, world);
    l.chunk = l.padded / world;
    l.error_at = errors;
    l.server_at = servers;
    l.bits_at = block_;
    errors += l.padded;
    servers += l.chunk;
    block_ += l.chunk / 8;
    largest = std::max(largest, l.padded);
    layout_.push_back(l);
  }
  const size_t n = tensors_.size();
  worker_error_ = Buffer<float>(tracker, MemoryCategory::kOptimizerState, size_t(errors));
  server_error_ = Buffer<float>(tracker, MemoryCategory::kOptimizerState, size_t(servers));
  value_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(largest));
  const size_t blocks = size_t(world * block_);
  send_ = Buffer<uint8_t>(tracker, MemoryCategory::kCommunication, blocks);
  recv_ = Buffer<uint8_t>(tracker, MemoryCategory::kCommunication, blocks);
  server_bits_ = Buffer<uint8_t>(tracker, MemoryCategory::kCommunication, size_t(block_));
  gathered_ = Buffer<uint8_t>(tracker, MemoryCategory::kCommunication, blocks);
  worker_scales_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(world) * n);
  server_scales_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(world) * n);
}

CompressionMemory OneBitAllReduce::MemoryOf(const std::vector<int64_t> &numels, int64_t world) {
  int64_t errors = 0, largest = 0, block = 0;
  for (int64_t n : numels) {
    const int64_t padded = Padded(n, world);
    errors += padded + padded / world;
    largest = std::max(largest, padded);
    block += padded / world / 8;
  }
  CompressionMemory m;
  m.residual_bytes = 4 * errors;
  m.communication_bytes =
      4 * largest + (3 * world + 1) * block + 2 * 4 * world * int64_t(numels.size());
  return m;
}

void OneBitAllReduce::ResetErrors() {
  ZeroOwnBuffer(worker_error_);
  ZeroOwnBuffer(server_error_);
}

void OneBitAllReduce::AppendOwnState(OwnState *out) {
  AppendOwnBuffer("onebit.worker_error", worker_error_, out);
  AppendOwnBuffer("onebit.server_error", server_error_, out);
}

void OneBitAllReduce::Compress(const float *data) {
  const int64_t world = comm_->size(), rank = comm_->rank();
  float *x = value_.data();
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const TensorSpan &span = tensors_[t];
    const Layout &l = layout_[t];
    float *error = worker_error_.data() + l.error_at;
    for (int64_t k = 0; k < l.padded; ++k)
      x[k] = (k < span.numel ? data[span.offset + k] : 0.0f) + error[k];
    // The bits of each server's chunk go to that server's block.
    const float scale = RootMeanSquare(x, l.padded);
    for (int64_t j = 0; j < world; ++j)
      SignsWithError(x + j * l.chunk, l.chunk, scale, error + j * l.chunk,
                     send_.data() + j * block_ + l.bits_at);
    worker_scales_.data()[size_t(rank) * tensors_.size() + t] = scale;
  }
}

void OneBitAllReduce::Serve() {
  const int64_t world = comm_->size(), rank = comm_->rank();
  const size_t n = tensors_.size();
  float *y = value_.data();
  for (size_t t = 0; t < n; ++t) {
    const Layout &l = layout_[t];
    std::fill_n(y, l.chunk, 0.0f);
    for (int64_t i = 0; i < world; ++i) {  // in rank order: every server adds alike
      const float w = worker_scales_.data()[size_t(i) * n + t] * (1.0f / float(world));
      const uint8_t *bits = recv_.data() + i * block_ + l.bits_at;
      for (int64_t k = 0; k < l.chunk; ++k) y[k] += Signed(bits, k, w);
    }
    float *error = server_error_.data() + l.server_at;
    for (int64_t k = 0; k < l.chunk; ++k) y[k] += error[k];
    const float scale = RootMeanSquare(y, l.chunk);
    SignsWithError(y, l.chunk, scale, error, server_bits_.data() + l.bits_at);
    server_scales_.data()[size_t(rank) * n + t] = scale;
  }
}

void OneBitAllReduce::Decompress(float *data) const {
  const int64_t world = comm_->size();
  const size_t n = tensors_.size();
  for (size_t t = 0; t < n; ++t) {
    const TensorSpan &span = tensors_[t];
    const Layout &l = layout_[t];
    for (int64_t j = 0; j < world; ++j) {
      const float s = server_scales_.data()[size_t(j) * n + t];
      const uint8_t *bits = gathered_.data() + j * block_ + l.bits_at;
      const int64_t begin = j * l.chunk, end = std::min(span.numel, begin + l.chunk);
      for (int64_t at = begin; at < end; ++at) data[span.offset + at] = Signed(bits, at - begin, s);
    }
  }
}

Status OneBitAllReduce::Exchange(const uint8_t *out, uint8_t *in, bool all_to_all, uint32_t tag) {
  const int64_t world = comm_->size(), rank = comm_->rank();
  std::vector<PeerOp> ops;
  for (int64_t peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    const uint8_t *sent = all_to_all ? out + peer * block_ : out;
    ops.push_back({true, const_cast<uint8_t *>(sent), block_, peer, tag});
    ops.push_back({false, in + peer * block_, block_, peer, tag});
  }
  std::memcpy(in + rank * block_, all_to_all ? out + rank * block_ : out, size_t(block_));
  if (ops.empty()) return Status::Ok();
  totals_.payload_bytes += (world - 1) * block_;
  return comm_->Exchange(ops)->Wait();
}

Status OneBitAllReduce::Run(float *data) {
  const int64_t world = comm_->size();
  const int64_t n = int64_t(tensors_.size());
  Compress(data);
  DST_RETURN_IF_ERROR(Exchange(send_.data(), recv_.data(), /*all_to_all=*/true, kTagToServers));
  if (world > 1) DST_RETURN_IF_ERROR(comm_->AllGather(worker_scales_.data(), n)->Wait());
  Serve();
  DST_RETURN_IF_ERROR(
      Exchange(server_bits_.data(), gathered_.data(), /*all_to_all=*/false, kTagFromServers));
  if (world > 1) DST_RETURN_IF_ERROR(comm_->AllGather(server_scales_.data(), n)->Wait());
  Decompress(data);
  ++totals_.buckets;
  for (const TensorSpan &t : tensors_) totals_.dense_bytes += 4 * t.numel;
  totals_.payload_bytes += 2 * 4 * (world - 1) * n;
  totals_.gathered_bytes += 2 * world * block_;
  return Status::Ok();
}

}  // namespace dst
