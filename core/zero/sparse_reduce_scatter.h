// gradient_compression at ZeRO 2 and 3: a sparse reduce-scatter. A piece of
// staged gradients that another rank owns is not reduced to it as it is:
// this rank adds its error-feedback residual for that range, encodes the
// value (grad_codec.h), keeps what the encoding lost as the new residual and
// sends the payload to the owner alone. The owner receives every other
// rank's payload of the piece and sums, in rank order, their decodings and
// its own values (which it never encodes: they do not travel). So each rank
// sends a payload of each range it does not own and receives one payload
// per peer of each range it owns; nothing is all-gathered.
//
// Huffman-coded payloads differ in size: each travels after a 4-byte word
// with its size, and the owner posts the payload's receive once it has the
// size (when the piece is waited for). Pieces are matched by the order in
// which every rank launches them (the same on all ranks: the same layers'
// pieces in the same order), each on tags of its own.
//
// With momentum correction (Deep Gradient Compression) each rank encodes its
// velocity instead of its gradient, and the owner adds its own velocity.
//
// The residual covers the ranges this rank sends (the buffer minus its own
// shard), fp32, persists across steps and micro-batches (optimizer-state
// memory) and is this rank's own state (own_state.h); a piece with a
// non-finite value (an fp16 overflow) leaves its residual unchanged.
#pragma once

#include <cstdint>
#include <memory>

#include "core/comm/communicator.h"
#include "core/runtime/memory.h"
#include "core/zero/grad_codec.h"
#include "core/zero/grad_compression.h"
#include "core/zero/shard_layout.h"

namespace dst {

class SparseReduceScatter {
 public:
  // `comm` must outlive this; `max_piece`: the most elements one Launch sends.
  SparseReduceScatter(const CodecOptions &codec, Communicator *comm, const ShardLayout &layout,
                      int64_t max_piece, MemoryTracker *tracker);

  // data[0, count): this rank's fp32 values of the flat range [begin, begin +
  // count), which `owner`'s shard holds. Not the owner: the payload is sent
  // (the Work completes with the sends). The owner: the Work's Wait receives
  // the other ranks' payloads and leaves the sum in data[0, count). `data`
  // must stay valid until then; Waits run on one thread.
  std::unique_ptr<Work> Launch(float *data, int64_t begin, int64_t count, int64_t owner);

  // A piece reduced plainly (the warm-up) under momentum correction: data[0,
  // count) becomes this rank's next velocity of [begin, begin + count), kept
  // when finite. Nothing without momentum correction.
  void VelocityInPlace(float *data, int64_t begin, int64_t count);

  const CodecOptions &codec() const { return codec_; }
  const CompressionTotals &totals() const { return totals_; }
  // The residual (and the velocity) as this rank's own state; ResetOwnState zeroes them.
  void AppendOwnState(OwnState *out);
  void ResetOwnState();

  // Bytes of the residual (and, with momentum correction, the velocity:
  // the whole buffer, this rank's shard included) for a layout: the memory
  // estimate's optimizer state.
  static int64_t StateBytes(const CodecOptions &codec, const ShardLayout &layout) {
    return 4 * (layout.padded - layout.shard_size()) +
           (codec.momentum_correction ? 4 * layout.padded : 0);
  }

 private:
  class OwnerWork;
  class SenderWork;
  float *ResidualOf(int64_t begin);
  // Receives the payloads (sizes first when they vary) and sums into data.
  Status Collect(OwnerWork *work);

  CodecOptions codec_;
  Communicator *comm_;
  ShardLayout layout_;
  MemoryTracker *tracker_;
  ShardInfo mine_;
  uint32_t sequence_ = 0;
  CompressionTotals totals_;
  Buffer<float> residual_;  // [padded - shard] kOptimizerState
  Buffer<float> velocity_;  // [padded] kOptimizerState (momentum correction)
  Buffer<float> next_;      // [max_piece] a piece's next velocity
  Buffer<float> value_;     // [max_piece] kCommunication scratch
  Buffer<float> decoded_;   // [max_piece]
  Buffer<float> sum_;       // [max_piece]
  Buffer<uint32_t> order_;  // [max_piece] top-k's selection
};

}  // namespace dst
