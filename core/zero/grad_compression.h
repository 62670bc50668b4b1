// Compressed gradient reduction (gradient_compression) for ZeRO 0 and 1: a
// bucket of the full gradient buffer is not all-reduced; each rank adds its
// error-feedback residual, encodes the bucket (grad_codec.h: top-k, 1-bit or
// 2-bit), keeps what the encoding lost as its new residual, and all-gathers
// the encodings; every rank that keeps the bucket (all at stage 0, its owner
// at stage 1) decodes and sums them in rank order, so they hold the same sum.
// Huffman-coded payloads differ in size: their sizes are all-gathered first
// and the payloads travel padded to the largest.
//
// The residual is per rank and persists across steps (optimizer-state
// memory, fp32, the whole padded buffer); a step with a non-finite bucket
// (an fp16 overflow, skipped by the loss scaler) leaves that bucket's
// residual unchanged. It is the rank's own state (own_state.h): checkpoints
// keep it for a load into the same layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/runtime/memory.h"
#include "core/zero/grad_codec.h"
#include "core/zero/own_state.h"
#include "core/zero/storage.h"

namespace dst {

// The codec a config's gradient_compression section asks for (momentum
// correction takes SGD's momentum and dampening from the optimizer).
CodecOptions CodecOptionsOf(const GradientCompressionConfig &config,
                            const OptimizerConfig &optimizer);

// Deep Gradient Compression's momentum correction over one range:
// next[i] = momentum u[i] + (1 - dampening) g[i].
void NextVelocity(const CodecOptions &codec, const float *u, const float *g, float *next,
                  int64_t n);
// Once the range was encoded (and its values were finite): u = next, but
// zero where top-k sent the entry (decoded nonzero; momentum factor masking:
// the velocity that went out is not applied again).
void KeepVelocity(const CodecOptions &codec, const float *next, const float *decoded, float *u,
                  int64_t n);

// Bytes of every buffer a GradCompressor of these sizes holds (residual:
// optimizer state; scratch and gather buffers: communication), for the
// memory estimate.
struct CompressionMemory {
  int64_t residual_bytes = 0;
  int64_t communication_bytes = 0;
};
CompressionMemory CompressionMemoryOf(const CodecOptions &codec, int64_t padded,
                                      int64_t bucket_elements, int64_t world);

// Totals since the start (the metrics' "compression" section).
struct CompressionTotals {
  int64_t buckets = 0;
  int64_t dense_bytes = 0;     // the buckets' fp32 bytes an all-reduce would have carried
  int64_t payload_bytes = 0;   // this rank's encodings (what it sent)
  int64_t gathered_bytes = 0;  // the all-gathers' buffers (every rank's, padded)
};

class GradCompressor {
 public:
  static constexpr int kSlots = 2;  // buckets in flight

  GradCompressor(const CodecOptions &codec, Communicator *comm, StorageType storage, int64_t padded,
                 int64_t bucket_elements, MemoryTracker *tracker);

  // Encodes data[0, n) (the storage type; offset `begin` of the buffer) plus
  // the residual, updates the residual and starts the all-gather in `slot`.
  Result<std::unique_ptr<Work>> Launch(int slot, const void *data, int64_t begin, int64_t n);
  // After slot's all-gather: data[0, n) = the sum of every rank's decoding.
  Status Complete(int slot, void *data, int64_t n);
  // A step reduced plainly (the warm-up) under momentum correction: data[0,
  // n) (storage type, offset `begin`) becomes this rank's next velocity,
  // which is kept (unmasked) when finite. Nothing without momentum correction.
  void VelocityInPlace(void *data, int64_t begin, int64_t n);

  const CodecOptions &codec() const { return codec_; }
  const CompressionTotals &totals() const { return totals_; }
  // The residual (and the velocity) as this rank's own state, names prefixed
  // with `prefix`; ResetOwnState zeroes them.
  void AppendOwnState(const std::string &prefix, OwnState *out);
  void ResetOwnState();

 private:
  CodecOptions codec_;
  Communicator *comm_;
  StorageType storage_;
  CompressionTotals totals_;
  Buffer<float> residual_;                   // [padded] kOptimizerState
  Buffer<float> velocity_;                   // [padded] kOptimizerState (momentum correction)
  Buffer<float> next_;                       // [bucket] the bucket's next velocity
  Buffer<float> value_;                      // [bucket] kCommunication scratch: value, then a sum
  Buffer<float> decoded_;                    // [bucket]
  Buffer<uint32_t> order_;                   // [bucket] top-k's selection
  Buffer<uint8_t> gather_[kSlots];           // [world x max payload] kCommunication
  int64_t payload_stride_[kSlots] = {0, 0};  // bytes per rank in the slot
  int64_t max_payload_ = 0;
};

}  // namespace dst
