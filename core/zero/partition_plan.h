// Where each layer's tensors live while the layer runs, for ZeRO stages 2 and
// 3. The flat buffers are partitioned by ShardLayout (rank r owns the
// contiguous range [r * shard, (r + 1) * shard)); a layer's parameters and
// gradients are staged, packed, in communication buffers sized for the
// largest layer:
//   - gradients a single layer writes go to a gradient staging buffer, are
//     reduced to their owners after that layer's backward, and the buffer is
//     reused for the next layer;
//   - gradients several layers write (the GPT's tied wte: the head writes it
//     first, the embedding last) go to a shared region that is reduced after
//     the last writer's backward;
//   - stage 3: parameters a layer reads are gathered from their owners into a
//     parameter staging buffer before its forward and its backward, except
//     tensors of at most stage3_param_persistence_threshold elements
//     (DeepSpeed's rule, ds_numel <= threshold), which every rank keeps whole.
// The plan is a pure function of the declarations and the layers' use of them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/layers/params.h"
#include "core/model/model.h"

namespace dst {

// Flat elements [begin, end), stored contiguously at `staged` in a staging
// buffer.
struct Segment {
  int64_t begin = 0, end = 0;
  int64_t staged = 0;
  int64_t size() const { return end - begin; }
};

// A tensor's place in a staging buffer.
struct TensorSlot {
  int id = 0;
  int64_t staged = 0;
};

// A packed staging layout: the tensors in order, adjacent tensors merged into
// one segment.
struct StagingLayout {
  std::vector<Segment> segments;
  std::vector<TensorSlot> slots;
  int64_t size = 0;  // elements
};

// Packs the tensors `ids` (in order) back to back.
StagingLayout PackTensors(const std::vector<ParamDecl> &decls, const std::vector<int> &ids);

// Tensors kept whole on every rank at stage 3: numel <= threshold, or
// whole[k] (param_types.h: zero_force_param_types / zero_allowed_param_types;
// empty: none); never an fp32[k] tensor (those are whole in fp32 anyway).
std::vector<int> PersistentTensors(const std::vector<ParamDecl> &decls, int64_t threshold,
                                   const std::vector<bool> &whole = {},
                                   const std::vector<bool> &fp32 = {});
int64_t PersistentElements(const std::vector<ParamDecl> &decls, int64_t threshold,
                           const std::vector<bool> &whole = {}, const std::vector<bool> &fp32 = {});

struct PartitionPlan {
  // Per layer: the gradients only this layer writes.
  std::vector<StagingLayout> grads;
  // Per layer: the shared tensors (segments into `shared`) whose last writer
  // is this layer: reduced after its backward.
  std::vector<std::vector<Segment>> shared_after;
  // Tensors written by more than one layer, in one region.
  StagingLayout shared;
  // Stage 3, per layer: the parameters it reads that are not persistent.
  std::vector<StagingLayout> params;
  // Stage 3: the persistent tensors, in one region.
  StagingLayout persistent;
  // 16-bit training with fp16/bf16_override_modules: the tensors kept in
  // fp32, whole on every rank, in one region (fp32_params.h); none of the
  // above stages, gathers or reduces them.
  StagingLayout fp32;
  int64_t max_grad_staging = 0, max_param_staging = 0;
};

// `persistence_threshold` < 0: no parameter partitioning (stage 2).
// `fp32[k]`: tensor k is kept in fp32 (param_types.h: Fp32ByParamType).
PartitionPlan BuildPartitionPlan(const std::vector<ParamDecl> &decls,
                                 const std::vector<LayerParamUse> &layers,
                                 int64_t persistence_threshold, const std::vector<bool> &whole = {},
                                 const std::vector<bool> &fp32 = {});

}  // namespace dst
