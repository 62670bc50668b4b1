// Gradient synchronisation over the data-parallel group, the `distributed`
// half of ZeRO (the sharded optimizer is the other: sharded_optimizer.h).
// One strategy per stage, chosen once (MakeGradientSync) and installed among
// the model's layer hooks:
//
//   stages 0, 1  buckets      the full gradient buffer reduced in buckets from
//                             the top, launched during the step's last
//                             backward with overlap_comm (all-reduce at 0,
//                             reduce to the owner at 1); under 16 bits each
//                             layer's fp32 gradients staged and rounded into
//                             the buffer (a partition over a group of one)
//   stages 2, 3  partitioned  each layer's gradients staged and reduced to
//                             their owners after its backward (two staging
//                             buffers with overlap_comm)
//
// Both leave this rank's reduced gradients over the state range (StateGrads)
// for the optimizer, averaged under fp32 (16 bits: the optimizer's step
// unscales them). Parameter gathering (stage 3) is its own hook
// (param_gathering.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/common/status.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "core/zero/bucket_reducer.h"
#include "core/zero/grad_codec.h"
#include "core/zero/grad_partition.h"
#include "core/zero/own_state.h"
#include "core/zero/zero_shards.h"

namespace dst {

// Told what happens to the state range's reduced gradients (the offloaded
// optimizer copies them to the host during the backward and replays what
// changes them afterwards).
class GradObserver {
 public:
  virtual ~GradObserver() = default;
  // Flat range [begin, begin + count) holds the step's reduced sum.
  virtual void GradsFinal(int64_t begin, int64_t count) = 0;
  // The state range's gradients were multiplied by k (fp32 averaging).
  virtual void GradsScaled(float k) = 0;
  // They were written otherwise (a tied weight's sum): copies are stale.
  virtual void GradsChanged() = 0;
  // They are about to be written in place (zeroed, scaled, added to): the
  // device work queued next must not overtake a copy still reading them.
  virtual void BeforeGradsWrite() = 0;
};

struct GradSyncOptions {
  StorageType wire = StorageType::kFp32;  // of the reduction
  bool overlap = false;                   // overlap_comm, with more than one rank
  int64_t bucket_elements = 1;            // reduce_bucket_size
  bool once_per_step = false;             // ZeRO 2 under a pipeline: reduce once per step
  bool compression = false;               // gradient_compression.enabled
  CodecOptions codec;
  int64_t compression_warmup = 0;  // gradient_compression's uncompressed steps
};

class GradientSync : public LayerHooks {
 public:
  ~GradientSync() override;
  // Null, or the optimizer that keeps a host copy of the reduced gradients.
  virtual void SetObserver(GradObserver *observer) { observer_ = observer; }

  // A step begins: gradients zero, nothing in flight. `step`: its number
  // (gradient_compression's warm-up); `local`: its gradients are not
  // reduced (1-bit Adam's compressed steps keep each rank's own).
  Status Zero(int64_t step, bool local);
  // A backward follows (DataParallelism::BeginBackward).
  virtual void BeginBackward(bool last, bool last_of_chunk) = 0;
  Status BeforeBackward(size_t layer) override;
  Status BeforeWeightGradient(size_t layer) override;
  Status AfterBackward(size_t layer) override;
  // Launches what is left, waits for everything, and (fp32) averages this
  // rank's state range.
  Status Finish();
  // This rank's reduced gradients over the state range (storage type).
  virtual void *StateGrads() = 0;
  // After a forward_backward without a step: the full averaged gradient
  // readable (ReadGrad).
  virtual Status Gather() = 0;
  // Tensor `id`'s gradient as the group stores it, whole on every rank
  // (collective at stages 1-3), and adding to this rank's part of it.
  Status ReadStored(int id, float *out);
  Status AddStored(int id, const float *in);
  // The full gradient of tensor `id` on the host, times `factor` under 16
  // bits (the optimizer's GradFactor); stages 1-3 need Gather first.
  Status ReadGrad(int id, double factor, float *out) const;

  virtual const CompressionTotals *compression_totals() const = 0;
  // gradient_compression's residuals and velocities: this rank's own state
  // (own_state.h); ResetOwnState zeroes them.
  virtual void AppendOwnState(OwnState *out) = 0;
  virtual void ResetOwnState() = 0;
  virtual const std::vector<GradBucket> &buckets() const;

 protected:
  GradientSync(const ZeroShards *shards, const GradSyncOptions &options);
  // The strategy's part of Zero, Finish and ReadGrad.
  virtual Status ZeroStrategy(bool compressed) = 0;
  virtual Status FinishStrategy() = 0;
  // The full gradient buffer ReadGrad reads (null: not gathered).
  virtual const void *FullGrads() const = 0;

  const ZeroShards &shards_;
  GradSyncOptions options_;
  StorageOps ops_;
  GradObserver *observer_ = nullptr;
  // Stages 2, 3: each layer's gradients to their owners; 16 bits at 0, 1:
  // staged and rounded into the full buffer over a group of one.
  std::unique_ptr<GradientPartition> grads_;
  bool local_ = false;     // this step's gradients are not reduced
  bool gathered_ = false;  // Gather ran since the step began
};

// The strategy for `shards.stage`; `shards` must outlive it.
std::unique_ptr<GradientSync> MakeGradientSync(const ZeroShards *shards,
                                               const GradSyncOptions &options);

}  // namespace dst
