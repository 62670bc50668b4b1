// The compressed all-reduce of 1-bit Adam (DeepSpeed's NCCL backend, Tang
// et al. 2021), over the tensors of a flat buffer: the mean of every rank's
// values, each tensor sent as one sign bit per element and a scale, with
// error feedback on both sides.
//
// Per tensor (padded with zeros to a multiple of size x lcm(size, 8), cut
// into `size` server chunks):
//   worker: x += worker_error; scale = ||x|| / sqrt(padded);
//           worker_error = x - scale sign(x)   (sign(0) = +1)
//   all-to-all: chunk j's sign bits to rank j; all-gather the scales
//   server j: y = sum_i scale_i sign_i / size over its chunk; y += server_error;
//             s = ||y|| / sqrt(chunk); server_error = y - s sign(y)
//   all-gather the servers' bits and scales: x = s_j sign over chunk j.
// Every rank ends with the same values. The errors persist across calls
// (optimizer-state memory) and are this rank's own state (own_state.h): a
// checkpoint keeps them for a load into the same layout, where DeepSpeed
// resets them on every load.
#pragma once

#include <cstdint>
#include <vector>

#include "core/comm/communicator.h"
#include "core/runtime/memory.h"
#include "core/zero/grad_compression.h"

namespace dst {

// Elements [offset, offset + numel) of the flat buffer.
struct TensorSpan {
  int64_t offset = 0, numel = 0;
};

class OneBitAllReduce {
 public:
  // `comm` outlives this object.
  OneBitAllReduce(Communicator *comm, std::vector<TensorSpan> tensors, MemoryTracker *tracker);

  // data[span] of every tensor: this rank's values in, the compressed mean out.
  Status Run(float *data);
  // The error feedback forgotten (a checkpoint of another layout was loaded,
  // or 0/1 Adam's freeze).
  void ResetErrors();
  // The worker and server errors as this rank's own state.
  void AppendOwnState(OwnState *out);

  // Bytes this rank sent against the fp32 values an all-reduce carries.
  const CompressionTotals &totals() const { return totals_; }
  // Bytes of the error buffers (optimizer state) and the scratch
  // (communication) for tensors of these sizes.
  static CompressionMemory MemoryOf(const std::vector<int64_t> &numels, int64_t world);

 private:
  struct Layout {
    int64_t padded, chunk;  // padded elements; elements per server chunk
    int64_t error_at;       // offset in worker_error_
    int64_t server_at;      // offset in server_error_
    int64_t bits_at;        // byte offset of its chunk in a rank's block
  };
  void Compress(const float *data);    // worker side, into send_
  void Serve();                        // recv_ -> server bits and scale
  void Decompress(float *data) const;  // gathered_ -> data
  // all_to_all: block j of `out` goes to rank j, rank i's block for this one
  // lands in block i of `in`; else this rank's `out` block goes to every
  // rank, rank i's lands in block i of `in` (an all-gather).
  Status Exchange(const uint8_t *out, uint8_t *in, bool all_to_all, uint32_t tag);

  Communicator *comm_;
  std::vector<TensorSpan> tensors_;
  std::vector<Layout> layout_;
  int64_t block_ = 0;  // bytes of one rank's bits for one server (all tensors' chunks)
  CompressionTotals totals_;
  Buffer<float> worker_error_, server_error_;  // kOptimizerState
  // kCommunication scratch: one padded tensor; the all-to-all's blocks out
  // and in ([size x block]); the server's bits ([block]) and everyone's
  // ([size x block]); the scales ([size x tensors], this rank's in its row).
  Buffer<float> value_;
  Buffer<uint8_t> send_, recv_, server_bits_, gathered_;
  Buffer<float> worker_scales_, server_scales_;
};

}  // namespace dst
