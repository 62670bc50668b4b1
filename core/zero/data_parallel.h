// Data parallelism over flat gradient and parameter buffers, ZeRO style.
//   stage 0: gradients all-reduced in buckets (averaged); every rank steps the
//            whole model.
//   stage 1: optimizer state partitioned: each bucket of gradients is reduced
//            to the rank that owns it, each rank steps its shard, and the
//            updated parameters are all-gathered.
// Buckets are contiguous ranges of the flat buffer taken from the top, because
// backward finishes the last layers (highest offsets) first; with overlap_comm
// a bucket is launched as soon as backward has passed below it.
#pragma once

#include <memory>
#include <vector>

#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/optim/optimizer.h"
#include "core/runtime/memory.h"

namespace dst {

struct ShardInfo {
  int64_t offset = 0;
  int64_t size = 0;
};

// A flat buffer of `numel` elements padded to a multiple of `dp` and cut into
// dp equal contiguous shards.
struct ShardLayout {
  int64_t numel = 0, padded = 0, dp = 1;
  ShardLayout(int64_t numel_, int64_t dp_);
  int64_t shard_size() const { return padded / dp; }
  ShardInfo Shard(int64_t rank) const { return {rank * shard_size(), shard_size()}; }
  int64_t OwnerOf(int64_t offset) const { return offset / shard_size(); }
};

// One gradient bucket: [begin, end) of the flat buffer, reduced to `root`
// (stage 1) or all-reduced (root -1, stage 0).
struct GradBucket {
  int64_t begin = 0, end = 0;
  int64_t root = -1;
};

class DataParallel {
 public:
  DataParallel(const Config &config, int64_t numel, Communicator *dp, MemoryTracker *tracker);

  const ShardLayout &layout() const { return layout_; }
  ShardInfo my_shard() const { return layout_.Shard(dp_->rank()); }
  int stage() const { return stage_; }
  Optimizer &optimizer() { return *optimizer_; }
  Communicator &comm() { return *dp_; }
  const std::vector<GradBucket> &buckets() const { return buckets_; }

  // Start of a step's last backward: nothing is launched yet.
  void BeginReduction();
  // Backward has finished every gradient at offsets >= boundary: launch the
  // buckets entirely above it (overlap_comm).
  void GradientsFinalAbove(float *grads, int64_t boundary);
  // Launches what is left, waits for everything, and averages: the whole
  // buffer (stage 0) or this rank's shard (stage 1).
  Status FinishReduction(float *grads);
  // Global L2 norm of the averaged gradients (over shards for stage 1).
  Result<double> GradNorm(const float *grads);
  // Scales the gradients this rank will use.
  void ScaleGradients(float *grads, float k);
  // Optimizer update of this rank's part, then all-gather of parameters (stage 1).
  Status Step(float *params, const float *grads, double lr);
  // Stage 1: all-gathers the averaged gradient shards so every rank holds the
  // full gradient (for dst_engine_get_grad after forward_backward).
  Status GatherGradients(float *grads);
  // Mean of a per-rank scalar across the group.
  Result<double> Average(double value);

 private:
  void Launch(float *grads, size_t bucket);
  void BuildBuckets(int64_t bucket_elements);

  int stage_;
  Communicator *dp_;
  ShardLayout layout_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<GradBucket> buckets_;  // from the top of the buffer down
  std::vector<std::unique_ptr<Work>> pending_;
  size_t next_bucket_ = 0;
};

}  // namespace dst
