#include "core/zero/grad_compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace dst {

CodecOptions CodecOptionsOf(const GradientCompressionConfig &config,
                            const OptimizerConfig &optimizer) {
  CodecOptions o;
  o.kind = config.algorithm == "1bit"   ? CodecKind::kOneBit
           : config.algorithm == "2bit" ? CodecKind::kTwoBit
                                        : CodecKind::kTopK;
  o.topk_ratio = config.topk_ratio;
  o.huffman = config.huffman_coding && o.kind == CodecKind::kTopK;
  o.warmup_steps = config.warmup_steps;
  o.momentum_correction = config.momentum_correction;
  o.momentum = optimizer.momentum;
  o.dampening = optimizer.dampening;
  o.chunk = config.chunk_size;
  return o;
}

void NextVelocity(const CodecOptions &codec, const float *u, const float *g, float *next,
                  int64_t n) {
  const float momentum = float(codec.momentum), keep = float(1.0 - codec.dampening);
  for (int64_t i = 0; i < n; ++i) next[i] = momentum * u[i] + keep * g[i];
}

void KeepVelocity(const CodecOptions &codec, const float *next, const float *decoded, float *u,
                  int64_t n) {
  if (codec.kind != CodecKind::kTopK) {
    std::memcpy(u, next, size_t(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) u[i] = decoded[i] != 0.0f ? 0.0f : next[i];
}

CompressionMemory CompressionMemoryOf(const CodecOptions &codec, int64_t padded,
                                      int64_t bucket_elements, int64_t world) {
  const int64_t bucket = std::min(bucket_elements, padded);
  CompressionMemory m;
  m.residual_bytes = 4 * padded * (codec.momentum_correction ? 2 : 1);  // + the velocity
  m.communication_bytes =
      3 * 4 * bucket + GradCompressor::kSlots * world * MaxPayloadBytes(codec, bucket);
  return m;
}

GradCompressor::GradCompressor(const CodecOptions &codec, Communicator *comm, StorageType storage,
                               int64_t padded, int64_t bucket_elements, MemoryTracker *tracker)
    : codec_(codec), comm_(comm), storage_(storage) {
  const int64_t bucket = std::min(bucket_elements, padded);
  max_payload_ = MaxPayloadBytes(codec_, bucket);
  residual_ = Buffer<float>(tracker, MemoryCategory::kOptimizerState, size_t(padded));
  if (codec_.momentum_correction) {
    velocity_ = Buffer<float>(tracker, MemoryCategory::kOptimizerState, size_t(padded));
    next_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(bucket));
  }
  value_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(bucket));
  decoded_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(bucket));
  order_ = Buffer<uint32_t>(tracker, MemoryCategory::kCommunication, size_t(bucket));
  for (Buffer<uint8_t> &g : gather_)
    g = Buffer<uint8_t>(tracker, MemoryCategory::kCommunication,
                        size_t(comm_->size() * max_payload_));
}

Result<std::unique_ptr<Work>> GradCompressor::Launch(int slot, const void *data, int64_t begin,
                                                     int64_t n) {
  float *value = value_.data();
  float *residual = residual_.data() + begin;
  if (storage_ == StorageType::kFp32)
    std::memcpy(value, data, size_t(n) * 4);
  else
    Widen(storage_, data, value, n);
  float *velocity = velocity_.data() ? velocity_.data() + begin : nullptr;
  if (velocity) {  // momentum correction: the velocity is what travels
    NextVelocity(codec_, velocity, value, next_.data(), n);
    std::memcpy(value, next_.data(), size_t(n) * sizeof(float));
  }
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    value[i] += residual[i];
    finite &= std::isfinite(value[i]);
  }
  const int64_t world = comm_->size(), rank = comm_->rank();
  const int64_t fixed = FixedPayloadBytes(codec_, n);
  // The payload is encoded straight into this rank's place of the gather
  // buffer; a variable size is placed after the sizes are known.
  uint8_t *gather = gather_[slot].data();
  uint8_t *mine = gather + (fixed >= 0 ? rank * fixed : 0);
  const int64_t bytes = EncodeGradient(codec_, value, n, mine, decoded_.data(), order_.data());
  if (finite) {
    for (int64_t i = 0; i < n; ++i) residual[i] = value[i] - decoded_[size_t(i)];
    if (velocity) KeepVelocity(codec_, next_.data(), decoded_.data(), velocity, n);
  }
  int64_t stride = fixed;
  if (fixed < 0) {
    // The sizes travel as the bits of 32-bit words (the gather copies them).
    std::vector<uint32_t> sizes(size_t(world), 0);
    sizes[size_t(rank)] = uint32_t(bytes);
    DST_RETURN_IF_ERROR(comm_->AllGather(reinterpret_cast<float *>(sizes.data()), 1)->Wait());
    stride = int64_t(*std::max_element(sizes.begin(), sizes.end()));
    if (stride > max_payload_ || stride % 4 != 0)
      return InternalError("gradient_compression: a rank announced a payload of " +
                           std::to_string(stride) + " bytes, more than the " +
                           std::to_string(max_payload_) +
                           " any rank can send; every rank must run the same settings");
    if (rank != 0) std::memmove(gather + rank * stride, gather, size_t(bytes));
    std::memset(gather + rank * stride + bytes, 0, size_t(stride - bytes));
  }
  payload_stride_[slot] = stride;
  ++totals_.buckets;
  totals_.dense_bytes += 4 * n;
  totals_.payload_bytes += bytes;
  totals_.gathered_bytes += world * stride;
  return comm_->AllGather(reinterpret_cast<float *>(gather), stride / 4);
}

void GradCompressor::AppendOwnState(const std::string &prefix, OwnState *out) {
  AppendOwnBuffer(prefix + "residual", residual_, out);
  AppendOwnBuffer(prefix + "velocity", velocity_, out);
}

void GradCompressor::ResetOwnState() {
  ZeroOwnBuffer(residual_);
  ZeroOwnBuffer(velocity_);
}

void GradCompressor::VelocityInPlace(void *data, int64_t begin, int64_t n) {
  if (!velocity_.data()) return;
  float *value = value_.data();
  if (storage_ == StorageType::kFp32)
    std::memcpy(value, data, size_t(n) * 4);
  else
    Widen(storage_, data, value, n);
  float *velocity = velocity_.data() + begin;
  NextVelocity(codec_, velocity, value, next_.data(), n);
  if (std::all_of(next_.data(), next_.data() + n, [](float x) { return std::isfinite(x); }))
    std::memcpy(velocity, next_.data(), size_t(n) * 4);
  if (storage_ == StorageType::kFp32)
    std::memcpy(data, next_.data(), size_t(n) * 4);
  else
    Narrow(storage_, next_.data(), data, n);
}

Status GradCompressor::Complete(int slot, void *data, int64_t n) {
  float *sum = storage_ == StorageType::kFp32 ? static_cast<float *>(data) : value_.data();
  std::fill(sum, sum + n, 0.0f);
  const int64_t stride = payload_stride_[slot];
  for (int64_t r = 0; r < comm_->size(); ++r)
    DST_RETURN_IF_ERROR(
        DecodeAddGradient(codec_, gather_[slot].data() + r * stride, stride, n, sum));
  if (storage_ != StorageType::kFp32) Narrow(storage_, sum, data, n);
  return Status::Ok();
}

}  // namespace dst
