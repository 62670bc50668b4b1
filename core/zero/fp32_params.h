// fp16.fp16_override_modules / bf16.bf16_override_modules: the tensors of the
// listed layer types (e.g. LayerNorm) train in fp32 while the rest trains in
// 16 bits. They are few and small, so every rank keeps them whole, as
// DeepSpeed keeps such modules out of its 16-bit groups:
//   - values [F] fp32 (kParameters): what the layers read, never rounded;
//   - gradients [F] fp32 (kGradients): what the layers write, summed over
//     the micro-batches and then over the data-parallel group in fp32.
// The optimizer steps them with everything else: their fp32 master weights
// and state sit in the state range like every element's, their gradients
// replace the (zero) 16-bit ones there, and after the step the updated
// masters become their values (each rank its state range's part, then shared
// with the group). The flat 16-bit buffers keep a rounded copy of them, so
// checkpoints and layouts do not change; nothing reads it for compute.
#pragma once

#include <vector>

#include "core/comm/communicator.h"
#include "core/kernels/step_kernels.h"
#include "core/layers/params.h"
#include "core/runtime/memory.h"
#include "core/zero/partition_plan.h"
#include "core/zero/shard_layout.h"
#include "core/zero/storage.h"

namespace dst {

class Fp32Params {
 public:
  // Points the plan's fp32 tensors at this object's buffers and initialises
  // their values as the single-rank run does. `plan` and `store` must
  // outlive this object.
  // `placement`: where the values and gradients live (the model's memory)
  // and what copies them.
  Fp32Params(const PartitionPlan *plan, ParamStore<float> *store, MemoryTracker *tracker,
             uint64_t seed, StepPlacement placement = {});

  int64_t size() const { return plan_->fp32.size; }
  // The slot of tensor `id`, or null when it is not kept in fp32.
  const TensorSlot *Find(int id) const;

  // A step begins.
  void ZeroGrads() { grads_.zero(); }
  // The micro-batches' sums into the sum over `dp` (collective).
  Status ReduceGrads(Communicator &dp);
  // The gradients of flat elements [begin, begin + n) that belong to fp32
  // tensors over dst[0, n) (the rest of dst is left alone); dst in the
  // placement's memory, or the host's when `host_dst`.
  void OverlayGrads(int64_t begin, int64_t n, float *dst, bool host_dst = false) const;
  // Sum of squares of the gradients in flat range `range`, tensors
  // `excluded` (sorted or not) left out.
  double GradSquares(ShardInfo range, const std::vector<int> &excluded = {}) const;
  // Updated master weights of flat elements [begin, begin + n) into the
  // values (src in the placement's memory, or the host's when `host_src`).
  void TakeValues(int64_t begin, int64_t n, const float *src, bool host_src = false);
  // After each rank took its own range's values: every rank gets all of
  // them (collective; the ranges must not overlap and must cover every fp32
  // element).
  Status ShareValues(Communicator &dp, ShardInfo mine);

  const float *values(const TensorSlot &slot) const { return values_.data() + slot.staged; }
  float *values(const TensorSlot &slot) { return values_.data() + slot.staged; }
  const float *grads(const TensorSlot &slot) const { return grads_.data() + slot.staged; }
  float *grads(const TensorSlot &slot) { return grads_.data() + slot.staged; }

 private:
  // Calls fn(segment part's flat begin, its offset in the region, count) for
  // each part of [begin, begin + n) that an fp32 segment covers.
  template <typename Fn>
  void ForEachOverlap(int64_t begin, int64_t n, Fn &&fn) const;

  const PartitionPlan *plan_;
  const std::vector<ParamDecl> *decls_;
  StorageOps ops_;
  Buffer<float> values_;  // [fp32.size] kParameters
  Buffer<float> grads_;   // [fp32.size] kGradients
};

}  // namespace dst
