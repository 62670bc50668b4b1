// Causal self-attention as a building block, Megatron's tensor-parallel way:
// the query/key/value projection column-split by heads (every rank holds
// H / tp query heads and kv / tp key/value heads), the attention core on a
// rank's heads, the output projection row-split (its partial sums leave the
// region through SumRowParallel, which the layer calls).
//
// Its parts, as the families combine them:
//   projection  one fused weight ([q; k; v] blocks: GPT-2's c_attn; or per
//               head [q k v]: BLOOM's query_key_value), or three (LLaMA's
//               q_proj, k_proj, v_proj, their outputs packed into one qkv row)
//   positions   rotary embeddings on q and k (LLaMA), ALiBi biases on the
//               scores (BLOOM), or none here (GPT-2's learned positions)
//   core        causal softmax attention, grouped-query heads
//   output      o_proj / c_proj / dense
#pragma once

#include <string>
#include <vector>

#include "core/kernels/elementwise_math.h"
#include "core/layers/linear.h"
#include "core/layers/scratch.h"

namespace dst {

enum class QkvLayout {
  kFused,             // one weight [(H + 2 kv) hs, C]: q heads, k heads, v heads
  kFusedInterleaved,  // one weight [3 C, C] in BLOOM's order: per head q, k, v
  kSeparate,          // q_proj [H hs, C], k_proj and v_proj [kv hs, C]
};

struct AttentionConfig {
  int64_t d_model = 0;
  int64_t n_head = 1;
  int64_t n_kv_head = 1;
  int64_t head_dim = 0;
  QkvLayout qkv = QkvLayout::kFused;
  bool qkv_bias = true;
  bool out_bias = true;
  bool rotary = false;
  math::RopeParams rope;
  bool alibi = false;
  ParamInit init = ParamInit::Normal(0.02);
  ParamInit out_init = ParamInit::Normal(0.02);  // the output projection's weight
};

// One tensor-parallel rank's attention over micro-batches of B x T, the
// shape a backend chooses its attention kernels by (the layer's Shape; the
// engine sizes the saved probabilities by it before any layer exists).
AttentionShape AttentionShapeOf(const AttentionConfig &config, int64_t tp_size, int64_t tp_rank,
                                int64_t B, int64_t T);

// The family's tensor names (without ".weight"/".bias"): `qkv` for a fused
// projection, q, k, v for separate ones; `out` the output projection.
struct AttentionNames {
  std::string qkv, q, k, v, out;
};

// One micro-batch's saved tensors of the block.
template <typename T>
struct AttentionSaved {
  Operand<T> qkv;  // [N, W] the projection's output (rotated), the core's input
  Operand<T> att;  // [B, H', T, T] the softmax probabilities (recomputable)
  Operand<T> y;    // [N, H' hs] the core's output, the output projection's input
};

template <typename T>
class SelfAttention {
 public:
  SelfAttention() = default;
  SelfAttention(const AttentionConfig &config, const AttentionNames &names,
                const TensorParallelGroup &tp, ParamRegistry &registry);

  // This rank's attention over a micro-batch of B x T.
  AttentionShape Shape(int64_t B, int64_t seq) const;
  int64_t qkv_width() const { return q_width_ + 2 * kv_width_; }  // W, this rank's
  int64_t q_width() const { return q_width_; }                    // H' hs
  int64_t kv_width() const { return kv_width_; }                  // kv' hs: a position's keys
  int64_t d_model() const { return config_.d_model; }
  const ParallelLinear<T> &output() const { return out_; }

  // Generation (pass.mb.kv set): the core reads the earlier positions'
  // keys and values from the cache and keeps no probabilities.
  // x: the region input [N, C] -> s.qkv, s.att, s.y -> the output
  // projection's partial sums into `out` [N, C] (its bias added only without
  // tensor parallelism). A tensor kept in bf16 alone gets its fp32 values in
  // `scratch` (s.qkv / s.y with fp32 null).
  void Forward(const Pass<T> &pass, Operand<T> x, const AttentionSaved<T> &s, T *out,
               ScratchCursor<T> &scratch) const;
  // The probabilities again (selective recomputation), from s.qkv; y_scratch [N, H' hs].
  void RecomputeProbabilities(const Pass<T> &pass, const AttentionSaved<T> &s, T *y_scratch) const;

  // dy [N, C] (the output projection's output gradient, every row) ->
  // d_y [N, H' hs], and when `weights` the projection's gradients.
  void OutputBackward(const Pass<T> &pass, const T *dy, const AttentionSaved<T> &s, T *d_y,
                      bool weights) const;
  // d_y -> dqkv [N, W] through the core and the rotary embedding.
  // att_scratch: [threads, T, T].
  void CoreBackward(const Pass<T> &pass, const T *d_y, const AttentionSaved<T> &s, T *dqkv,
                    T *att_scratch) const;
  // The projection's linears with their output gradients from dqkv
  // (separate projections not Stacked: unpacked into `unpacked` [N, W] first).
  ColumnParts<T> InputParts(const Pass<T> &pass, const T *dqkv, T *unpacked) const;
  // Scratch InputParts needs.
  int64_t UnpackSize(int64_t N) const {
    return config_.qkv == QkvLayout::kSeparate ? N * qkv_width() : 0;
  }

 private:
  ComputeType Compute(const Pass<T> &pass) const {
    return pass.mb.ComputeOf(ModuleType::kAttention);
  }
  AttentionConfig config_;
  TensorParallelGroup tp_;
  int64_t heads_ = 1, kv_heads_ = 1;  // this rank's
  int64_t q_width_ = 0, kv_width_ = 0;
  // Whether separate q, k, v projections lie back to back in p (with
  // `grads`, their gradients too): then `stacked_` runs them as one.
  bool Stacked(ParamStore<T> &p, bool grads) const;
  std::vector<ParallelLinear<T>> projections_;  // one fused, or q, k, v
  ParallelLinear<T> stacked_;                   // q, k, v read as one (Stacked)
  ParallelLinear<T> out_;
};

}  // namespace dst
