// Data parallelism over flat gradient and parameter buffers, ZeRO style.
//   stage 0: gradients all-reduced in buckets (averaged); every rank steps the
//            whole model.
//   stage 1: optimizer state partitioned: each bucket of gradients is reduced
//            to the rank that owns it, each rank steps its shard, and the
//            updated parameters are all-gathered.
//   stage 2: gradients partitioned too: no full gradient buffer; each layer's
//            gradients are reduced to their owners right after its backward
//            (grad_partition.h), then as stage 1.
//   stage 3: parameters partitioned too: no full parameter buffer; each
//            layer's parameters are gathered before it runs (param_partition.h);
//            the optimizer steps the shard and nothing is all-gathered.
// Buckets (stages 0 and 1) are contiguous ranges of the flat buffer taken from
// the top, because backward finishes the last layers (highest offsets) first;
// with overlap_comm a bucket is launched as soon as backward has passed below it.
//
// DataParallel is the model's LayerHooks: the engine passes it to
// Model::Forward/Backward, which stop at the first hook that fails.
#pragma once

#include <memory>
#include <vector>

#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "core/optim/optimizer.h"
#include "core/runtime/memory.h"
#include "core/zero/grad_partition.h"
#include "core/zero/parallelism.h"
#include "core/zero/param_partition.h"
#include "core/zero/partition_plan.h"
#include "core/zero/shard_layout.h"

namespace dst {

// One gradient bucket: [begin, end) of the flat buffer, reduced to `root`
// (stage 1) or all-reduced (root -1, stage 0).
struct GradBucket {
  int64_t begin = 0, end = 0;
  int64_t root = -1;
};

// The flat buffers a model needs for a ZeRO stage (what its ParamStore
// allocates; the rest is partitioned here).
ParamStoreOptions StoreOptionsForStage(int stage, int64_t dp_size);

class DataParallel final : public DataParallelism {
 public:
  // `model` must have been built with StoreOptionsForStage(config.zero.stage,
  // dp->size()); it and `dp` must outlive this object.
  DataParallel(const Config &config, Model<float> *model, Communicator *dp, MemoryTracker *tracker);
  ~DataParallel() override;

  const ShardLayout &layout() const { return layout_; }
  ShardInfo my_shard() const { return layout_.Shard(dp_->rank()); }
  int stage() const override { return stage_; }
  Optimizer &optimizer() override { return *optimizer_; }
  Communicator &comm() { return *dp_; }
  const std::vector<GradBucket> &buckets() const { return buckets_; }
  const PartitionPlan &plan() const { return plan_; }

  // A step begins: gradients are zero, nothing is in flight.
  Status ZeroGradients() override;
  // A micro-batch's backward follows; during the step's last one stage 0/1
  // buckets may launch (overlap_comm).
  void BeginBackward(bool last) override { launch_buckets_ = overlap_ && last; }
  Status BeforeForward(size_t layer) override;
  Status BeforeBackward(size_t layer) override;
  Status AfterBackward(size_t layer) override;

  // Launches what is left, waits for everything, and averages: the whole
  // buffer (stage 0) or this rank's shard (stages 1-3).
  Status FinishReduction() override;
  // Global L2 norm of the averaged gradients (over shards for stages 1-3).
  Result<double> GradNorm() override;
  // Scales the gradients this rank will use.
  void ScaleGradients(float k) override;
  // Optimizer update of this rank's part, then the parameters every rank
  // needs: all-gathered (stages 1, 2) or refreshed persistent tensors (3).
  Status Step(double lr) override;
  // After a forward_backward without a step: makes the full averaged gradient
  // readable (stage 1: all-gathered in place; stages 2, 3: into a temporary
  // full-size buffer charged to gradients, freed when the next step begins).
  Status GatherGradients() override;
  // Mean of a per-rank scalar across the group.
  Result<double> Average(double value) override { return AverageOverGroup(*dp_, value); }

  // Whole tensors, whatever the stage. ReadParam is collective at stage 3
  // with dp > 1 unless the tensor is persistent (every rank must call it for
  // the same tensor); WriteParam expects the same data on every rank.
  Status ReadParam(int id, float *out) override;
  Status WriteParam(int id, const float *in) override;
  // Stages 2 and 3: an error unless GatherGradients ran since the step began.
  Status ReadGrad(int id, float *out) const override;
  // The whole flat parameter buffer [padded] if this rank holds one (stages
  // 0-2, and stage 3 on one rank, where the shard is everything), else null.
  float *FullParams() override;
  // The parameter values this rank holds and their flat range: the whole
  // padded buffer (stages 0-2) or this rank's shard (stage 3).
  float *LocalParams(ShardInfo *range) override;
  // The flat range this rank's optimizer state covers: the whole padded
  // buffer at stage 0, this rank's shard at stages 1-3.
  ShardInfo StateRange() const override {
    return stage_ == 0 ? ShardInfo{0, layout_.padded} : layout_.Shard(dp_->rank());
  }
  // The parameters were written through FullParams (a checkpoint load).
  Status ParamsChanged() override;

 private:
  void Launch(float *grads, size_t bucket);
  void BuildBuckets(int64_t bucket_elements);
  // Stage 0/1: backward has finished every gradient at offsets >= boundary:
  // launch the buckets entirely above it.
  void GradientsFinalAbove(float *grads, int64_t boundary);
  float *ShardGrads();
  float *ShardParams();

  int stage_;
  Communicator *dp_;
  Model<float> *model_;
  ShardLayout layout_;
  bool overlap_ = false, launch_buckets_ = false;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<GradBucket> buckets_;  // from the top of the buffer down
  std::vector<std::unique_ptr<Work>> pending_;
  size_t next_bucket_ = 0;
  PartitionPlan plan_;                          // stages 2, 3
  std::unique_ptr<GradientPartition> grads_;    // stages 2, 3
  std::unique_ptr<ParameterPartition> params_;  // stage 3
  MemoryTracker *tracker_;
  Buffer<float> gathered_grads_;  // [padded] stages 2, 3 after GatherGradients
};

}  // namespace dst
