// ZeRO stages 2 and 3: partitioned gradients. This rank keeps only its shard
// of the summed gradients (4P/N bytes); there is no full-size gradient
// buffer. While layer i runs backward, the gradients it alone writes point
// into a staging buffer sized for the largest layer; after its backward they
// are reduced (ReduceSum per owning shard, in pieces of at most
// reduce_bucket_size) and each owner adds its piece to its shard. Every
// micro-batch is reduced, as DeepSpeed does, so accumulation never needs a
// full buffer. With overlap_comm two staging buffers alternate: layer i's
// reduction runs while layer i-1 computes. Gradients written by several layers
// (the tied wte) accumulate in a shared region, reduced after the last writer.
#pragma once

#include <memory>
#include <vector>

#include "core/comm/communicator.h"
#include "core/model/params.h"
#include "core/runtime/memory.h"
#include "core/zero/partition_plan.h"
#include "core/zero/shard_layout.h"

namespace dst {

struct GradPartitionOptions {
  bool double_buffer = false;   // overlap_comm
  int64_t bucket_elements = 0;  // largest single reduction; <= 0: unbounded
};

class GradientPartition {
 public:
  // `plan`, `comm` and `store` must outlive this object.
  GradientPartition(const PartitionPlan *plan, const ShardLayout &layout, Communicator *comm,
                    ParamStore<float> *store, MemoryTracker *tracker,
                    const GradPartitionOptions &options);
  ~GradientPartition();

  // This rank's gradient shard [shard_size]: after Drain, the sum over ranks
  // and micro-batches.
  float *shard() { return shard_.data(); }
  const float *shard() const { return shard_.data(); }

  // A step begins: waits for anything in flight and zeroes the shard.
  Status Zero();
  // Points layer's gradients at a free staging buffer (zeroed).
  Status BeforeBackward(size_t layer);
  // Launches the reductions of what layer's backward finished; the last
  // layer of the pass (index 0) drains everything.
  Status AfterBackward(size_t layer);
  // Waits for every reduction in flight and adds the owned pieces to the shard.
  Status Drain();

 private:
  struct Pending {
    std::unique_ptr<Work> work;
    const float *data;     // the staged piece (summed on the owner once done)
    int64_t begin, count;  // flat range
    int buffer;            // staging buffer index, or kSharedBuffer
    bool mine;
  };
  static constexpr int kSharedBuffer = 2;

  void Launch(const Segment &segment, float *base, int buffer);
  // Waits for the reductions out of `buffer` (-1: all).
  Status Wait(int buffer);

  const PartitionPlan *plan_;
  ShardLayout layout_;
  Communicator *comm_;
  ParamStore<float> *store_;
  GradPartitionOptions options_;
  ShardInfo mine_;
  Buffer<float> shard_;       // [shard_size] kGradients
  Buffer<float> staging_[2];  // [max_grad_staging] kCommunication (one unless double_buffer)
  Buffer<float> shared_;      // [shared.size] kCommunication
  int current_ = 0;           // staging buffer of the layer in backward
  std::vector<Pending> pending_;
};

}  // namespace dst
