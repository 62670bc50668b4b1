// gradient_compression with "target": "update" (ZeRO 0, more than one
// rank): the gradients stay on their rank, each rank steps its own optimizer
// on them (its moments see only its own data), and what travels is the
// step's change to the weights, encoded with error feedback (grad_codec.h)
// and averaged over the ranks — Efficient-Adam's scheme (Chen et al. 2022).
//
// Why not the gradient: Adam divides each coordinate by its own history, so
// a sparse or sign-only gradient — error feedback delivering a coordinate's
// delayed sum in one burst — gets one normalised step where the dense run
// took many. The update is already normalised; its delayed sum arrives
// whole.
//
//   Begin(w):  the weights the step starts from are kept.
//   the optimizer steps w in place on this rank's gradients.
//   Finish(w): per bucket, delta = w - start (plus the residual) is encoded,
//              the encodings all-gathered and summed in rank order, and
//              w = start + sum / ranks: every rank ends with the same weights.
//
// The first warmup_steps steps reduce their gradients plainly (one shared
// optimizer state); the ranks' moments part from there. Memory: the start
// copy and the residual (optimizer state, fp32, one each over the range).
#pragma once

#include <cstdint>

#include "core/comm/communicator.h"
#include "core/runtime/memory.h"
#include "core/zero/grad_compression.h"

namespace dst {

class UpdateExchange {
 public:
  // `comm` (the data-parallel group) outlives this object; `numel` weights,
  // exchanged `bucket_elements` at a time.
  UpdateExchange(const CodecOptions &codec, Communicator *comm, int64_t numel,
                 int64_t bucket_elements, MemoryTracker *tracker);

  // Whether optimizer step `step` (1-based) keeps its gradients local and
  // exchanges its update; the warm-up's steps reduce them.
  bool Compresses(int64_t step) const { return step > codec_.warmup_steps; }
  void Begin(const float *weights);
  // On failure (a peer lost) the weights are put back as Begin saw them.
  Status Finish(float *weights);

  const CompressionTotals &totals() const { return compressor_.totals(); }
  // The residual as this rank's own state (the start copy lives within a
  // step only); ResetOwnState zeroes it.
  void AppendOwnState(OwnState *out) { compressor_.AppendOwnState("update_compression.", out); }
  void ResetOwnState() { compressor_.ResetOwnState(); }
  // The optimizer-state bytes for `numel` weights (the memory estimate).
  static int64_t StateBytes(int64_t numel) { return 2 * 4 * numel; }

 private:
  Status Exchange(float *weights);

  CodecOptions codec_;
  Communicator *comm_;
  int64_t numel_, bucket_;
  GradCompressor compressor_;  // its residual: [numel] kOptimizerState
  Buffer<float> start_;        // [numel] kOptimizerState
  Buffer<float> delta_;        // [bucket] kCommunication
};

}  // namespace dst
