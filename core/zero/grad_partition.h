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
//
// The layers write fp32 gradients; the shard is kept in the storage type
// (fp32, or 16 bits under mixed precision: each owned piece is rounded as it
// is added), and the reduction runs in the communication type (fp32, or the
// 16-bit storage type: the staged piece is rounded to 16 bits for the wire).
// Once per step (a pipeline stage at ZeRO 2, whose micro-batches' backwards
// of one layer are spread over the step): each layer's gradients accumulate
// over the step's micro-batches in a step-wide buffer (allocated when the
// step begins, charged to gradients, freed once reduced), and are reduced
// once, after the layer's last backward of the step (SetFinalPass) — one
// reduction per step instead of one per micro-batch, for 4 bytes per stage
// parameter held during the step.
//
// Over a group of one rank the partition is "local": the shard is the whole
// buffer and a layer's staged gradients are added into it after its backward
// (how 16-bit ZeRO 0/1 accumulate fp32 layer gradients into 16-bit storage).
//
// With gradient compression a piece goes to its owner encoded, with this
// rank's error feedback (sparse_reduce_scatter.h), instead of reduced.
//
// Every buffer lives where the placement says (a device's memory or the
// host's) and every sum, rounding and fill runs through its step backend.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/comm/communicator.h"
#include "core/layers/params.h"
#include "core/runtime/memory.h"
#include "core/zero/grad_codec.h"
#include "core/zero/partition_plan.h"
#include "core/zero/shard_layout.h"
#include "core/zero/sparse_reduce_scatter.h"
#include "core/zero/storage.h"

namespace dst {

struct GradPartitionOptions {
  bool double_buffer = false;                // overlap_comm
  int64_t bucket_elements = 0;               // largest single reduction; <= 0: unbounded
  StorageType storage = StorageType::kFp32;  // of the shard
  StorageType wire =
      StorageType::kFp32;      // of the reduction: fp32, `storage`, or 16 bits under fp32
  bool once_per_step = false;  // accumulate locally, reduce once per step
  // gradient_compression: each piece travels encoded to its owner alone
  // (sparse_reduce_scatter.h; fp32 values, the wire type is not used). Null:
  // reductions as they are. Host memory only.
  const CodecOptions *codec = nullptr;
};

class GradientPartition {
 public:
  // `plan`, `comm` and `store` must outlive this object.
  GradientPartition(const PartitionPlan *plan, const ShardLayout &layout, Communicator *comm,
                    ParamStore<float> *store, MemoryTracker *tracker,
                    const GradPartitionOptions &options, StepPlacement placement = {});
  ~GradientPartition();

  // This rank's gradient shard [shard_size] in the storage type: after
  // Drain, the sum over ranks and micro-batches.
  void *shard() { return shard_.at(0); }
  const void *shard() const { return shard_.at(0); }
  // The same, for fp32 storage.
  float *shard_f32() { return static_cast<float *>(shard_.at(0)); }

  // A step begins: waits for anything in flight and zeroes the shard.
  Status Zero();
  // Points layer's gradients at a free staging buffer (zeroed).
  Status BeforeBackward(size_t layer);
  // Launches the reductions of what layer's backward finished; the last
  // layer of the pass (index 0) drains everything. Once per step: only in a
  // final pass, and nothing is waited for until Drain.
  Status AfterBackward(size_t layer);
  // Once per step: whether the backward that follows is each of its layers'
  // last of the step (its chunk's last backward).
  void SetFinalPass(bool final) { final_pass_ = final; }
  // Called with each flat range [begin, begin + count) of this rank's shard
  // once it holds the step's sum (its reduction in a final pass was added):
  // ZeRO-Offload on a device copies it down then, during the backward.
  using OnFinal = std::function<void(int64_t begin, int64_t count)>;
  void SetOnFinal(OnFinal on_final) { on_final_ = std::move(on_final); }
  // Waits for every reduction in flight and adds the owned pieces to the shard.
  Status Drain();
  // This step's pieces go compressed (with a codec; false: gradient
  // compression's warm-up, the plain reduction in fp32).
  void SetCompressed(bool compressed) { compressed_ = compressed; }
  // gradient_compression's sparse reduce-scatter (more than one rank), else null.
  const SparseReduceScatter *compressor() const { return sparse_.get(); }
  SparseReduceScatter *compressor() { return sparse_.get(); }

 private:
  struct Pending {
    std::unique_ptr<Work> work;
    const void *data;      // the piece on the wire (summed on the owner once done)
    int64_t begin, count;  // flat range
    int buffer;            // staging buffer index, or kSharedBuffer
    bool mine;
    bool final;  // launched in a final pass: the shard's piece is the step's sum once added
  };
  static constexpr int kSharedBuffer = 2;
  static constexpr int kStepBuffer = 3;  // once per step: the step-wide accumulation

  // Reduces segment's staged values (fp32 at base) to their owners; index
  // `buffer` names the staging buffer (and its wire buffer).
  // `wire_offset`: where `base` starts in the buffer's 16-bit wire copy.
  void Launch(const Segment &segment, float *base, int buffer, int64_t wire_offset = 0);
  // The owned, reduced piece (wire type) into the shard.
  void AddToShard(int64_t begin, const void *data, int64_t count);
  // Waits for the reductions out of `buffer` (-1: all).
  Status Wait(int buffer);
  // Points every single-writer gradient at the first staging buffer (where a
  // pass cut short by an error still writes only into memory it owns).
  void PointAtStaging();

  const PartitionPlan *plan_;
  ShardLayout layout_;
  Communicator *comm_;
  ParamStore<float> *store_;
  GradPartitionOptions options_;
  MemoryTracker *tracker_;
  StorageOps ops_;  // the placement's memory and step backend
  ShardInfo mine_;
  FlatBuffer shard_;          // [shard_size] kGradients, storage type
  Buffer<float> staging_[2];  // [max_grad_staging] kCommunication (one unless double_buffer)
  Buffer<float> shared_;      // [shared.size] kCommunication
  FlatBuffer wire_[4];        // 16-bit wire: staging_[0], staging_[1], shared_, step_ rounded
  Buffer<float> step_;        // once per step: [sum of the layers' staging sizes]
  std::vector<int64_t> step_offset_;  // once per step: [layer] its gradients in step_
  bool final_pass_ = false;
  OnFinal on_final_;
  int current_ = 0;  // staging buffer of the layer in backward
  std::vector<Pending> pending_;
  std::unique_ptr<SparseReduceScatter> sparse_;
  bool compressed_ = true;
};

}  // namespace dst
