// The GPT-2 layers: embedding, transformer block, and the head (final
// LayerNorm, LM head tied to the token embedding, cross-entropy).
#pragma once

#include <string>

#include "core/layers/layer.h"
#include "core/tensor_parallel/tp_group.h"

namespace dst {

struct GptDims {
  int64_t vocab = 256;
  int64_t n_ctx = 256;
  int64_t n_layer = 1;
  int64_t n_head = 1;
  int64_t d_model = 64;
};

// x[b, t] = wte[token[b, t]] + wpe[t]  ->  [B, T, C]
// Vocabulary-parallel (tp > 1): a rank holds wte rows [r V/tp, (r+1) V/tp)
// and looks up the tokens among them (zeros for the others); the ranks'
// lookups are summed (all-reduce), then the positions added once.
// Sequence-parallel: the sum is reduce-scattered, so the rank keeps its
// rows (sequence_parallel.h), and the positions are added to those.
template <typename T>
class GptEmbedding final : public Layer<T> {
 public:
  GptEmbedding(const GptDims &dims, ParamRegistry &registry, const TensorParallelGroup &tp = {});
  std::string_view Kind() const override { return "gpt_embedding"; }
  int64_t OutWidth() const override { return dims_.d_model; }
  // Saves its output [B, T, C] (sequence-parallel: this rank's rows).
  std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &limits) const override;
  int64_t ScratchSize(const ActivationLimits &limits) const override;
  void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                const MicroBatch<T> &mb) override;
  std::vector<SavedTensorSpec> DeferredTensors(const ActivationLimits &limits) const override;
  void BackwardInput(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                     LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  void BackwardWeight(const T *in, const LayerActivations<T> &act,
                      const LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  // Deferred: the output gradient [N, C] (the input half has nothing to do).
  ModuleSet Modules() const override { return {ModuleType::kEmbedding}; }
  double ForwardFlops(int64_t, int64_t) const override { return 0.0; }
  int wte_id() const { return wte_; }

 private:
  GptDims dims_;
  TensorParallelGroup tp_;
  int64_t first_ = 0, rows_;  // this rank's vocabulary rows of wte
  int wte_ = -1, wpe_ = -1;
};

// Pre-LayerNorm transformer block:
//   res2 = x + c_proj(attn(c_attn(ln_1(x))));  out = res2 + mlp.c_proj(gelu(mlp.c_fc(ln_2(res2))))
// With tensor parallelism (Megatron's block) each tp rank holds H / tp
// whole heads: c_attn column-parallel (its q, k and v rows of those heads),
// attn.c_proj row-parallel, mlp.c_fc column-parallel, mlp.c_proj
// row-parallel; the LayerNorms and the row-parallel biases are whole on every
// rank. Forward all-reduces after each row-parallel GEMM (then adds its
// bias), backward after each column-parallel layer's input gradient (while
// its weight-gradient GEMM runs). Sequence-parallel, the block's input,
// output, LayerNorms and residual hold this rank's n = N / tp rows:
// all-gather before each column-parallel GEMM, reduce-scatter after each
// row-parallel one (sequence_parallel.h). Below, C' = C / tp and H' = H / tp.
template <typename T>
class GptBlock final : public Layer<T> {
 public:
  GptBlock(const GptDims &dims, int index, ParamRegistry &registry,
           const TensorParallelGroup &tp = {});
  std::string_view Kind() const override { return "gpt_transformer_block"; }
  int64_t OutWidth() const override { return dims_.d_model; }
  std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &limits) const override;
  int64_t ScratchSize(const ActivationLimits &limits) const override;
  void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                const MicroBatch<T> &mb) override;
  std::vector<SavedTensorSpec> DeferredTensors(const ActivationLimits &limits) const override;
  void BackwardInput(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                     LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  void BackwardWeight(const T *in, const LayerActivations<T> &act,
                      const LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  // Selective recomputation: the attention probabilities from the saved QKV.
  void RecomputeSaved(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  ModuleSet Modules() const override {
    return {ModuleType::kLayerNorm, ModuleType::kAttention, ModuleType::kLinear};
  }
  double ForwardFlops(int64_t B, int64_t seq) const override;

  // The saved tensors, N = B*T rows:
  enum Saved {
    kOut,      // [N, C] block output
    kLn1,      // [N, C]
    kLn1Mean,  // [N] (exact)
    kLn1Rstd,  // [N] (exact)
    kQkv,      // [N, 3C']
    kAtt,      // [B, H', T, T] softmax probabilities (recomputable)
    kAttY,     // [N, C'] attention output, this rank's heads merged
    kRes2,     // [N, C] residual after attention
    kLn2,      // [N, C]
    kLn2Mean,  // [N] (exact)
    kLn2Rstd,  // [N] (exact)
    kFch,      // [N, 4C']
    kFchGelu,  // [N, 4C']
    kNumSaved,
  };
  // The gradients the input half keeps for the weight half (zero bubble):
  enum Deferred {
    kDOut,   // [N, C] of the block output (mlp.c_proj's output gradient)
    kDFch,   // [N, 4C'] of mlp.c_fc's output
    kDLn2,   // [N, C] of ln_2's output
    kDRes2,  // [N, C] of the first residual (attn.c_proj's output gradient)
    kDQkv,   // [N, 3C'] of attn.c_attn's output
    kDLn1,   // [N, C] of ln_1's output
    kNumDeferred,
  };

 private:
  AttentionShape Attention(const MicroBatch<T> &mb) const {
    return {mb.B, mb.seq, c_local_, dims_.n_head / tp_.size};
  }
  // A row-parallel GEMM's partial output [N, C] summed over the group, then
  // its bias added (tp > 1; at tp 1 the GEMM added it). False on failure.
  bool SumRowParallel(T *out, const T *bias, const MicroBatch<T> &mb);
  // The block under sequence parallelism (sequence_parallel.h).
  void ForwardSequenceParallel(const T *in, LayerActivations<T> &a, const MicroBatch<T> &mb);
  void BackwardSequenceParallel(const T *in, const LayerActivations<T> &a, T *dout, T *din,
                                const MicroBatch<T> &mb);
  void BackwardInputSequenceParallel(const T *in, const LayerActivations<T> &a, T *dout, T *din,
                                     LayerActivations<T> &d, const MicroBatch<T> &mb);
  void BackwardWeightSequenceParallel(const T *in, const LayerActivations<T> &a,
                                      const LayerActivations<T> &d, const MicroBatch<T> &mb);
  // The attention branch's backward from attn.c_proj's output gradient to
  // c_attn's output gradient (the parts plain and sequence-parallel share).
  void AttentionBranchBackward(const T *dy, const LayerActivations<T> &a, T *d_ln, T *dqkv,
                               T *att_scratch, const MicroBatch<T> &mb);
  // A column-parallel linear's backward (c_attn, c_fc; weight w, bias b):
  // dx [N, in] is a partial sum over the tp group, summed while the weights'
  // GEMM runs; at tp 1 both gradients in one call (bf16 compute rounds dy
  // once for both GEMMs). False on failure.
  // x16: x's bf16 stash (LayerActivations::Bf16), or null.
  bool ColumnParallelBackward(const T *dy, const T *x, const uint16_t *x16, int w, int b,
                              int64_t in, int64_t out, T *dx, ComputeType compute,
                              const MicroBatch<T> &mb, const char *what);
  // A column-parallel layer's input gradient, launched (null at tp 1).
  std::unique_ptr<Work> SumInputGradient(T *din, int64_t N);
  bool Finish(std::unique_ptr<Work> work, const char *what);
  // The row-parallel layers' bias in their GEMM at tp 1 only.
  const T *GemmBias(int id) { return tp_.size == 1 ? this->store_->param(id) : nullptr; }

  GptDims dims_;
  TensorParallelGroup tp_;
  int64_t c_local_, f_local_;  // C' and 4C'
  int ln1_w_, ln1_b_, attn_w_, attn_b_, proj_w_, proj_b_;
  int ln2_w_, ln2_b_, fc_w_, fc_b_, fcproj_w_, fcproj_b_;
};

// ln_f, logits = ln_f(x) wte^T (tied), mean cross-entropy over targets != -1.
// Vocabulary-parallel (tp > 1): the logits of this rank's wte rows only
// (the embedding's own shard: no extra communication for the tie), the
// cross-entropy assembled across ranks (vocab_parallel.h), and the input
// gradient's partial sums all-reduced while the wte gradient's GEMM runs.
// Sequence-parallel: ln_f runs on this rank's rows, its output is gathered
// for the logits, and the input gradient reduce-scattered.
template <typename T>
class GptHead final : public Layer<T> {
 public:
  GptHead(const GptDims &dims, int wte_id, ParamRegistry &registry,
          const TensorParallelGroup &tp = {});
  std::string_view Kind() const override { return "gpt_head"; }
  int64_t OutWidth() const override { return 0; }
  std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &limits) const override;
  int64_t ScratchSize(const ActivationLimits &limits) const override;
  void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                const MicroBatch<T> &mb) override;
  std::vector<SavedTensorSpec> DeferredTensors(const ActivationLimits &limits) const override;
  void BackwardInput(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                     LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  void BackwardWeight(const T *in, const LayerActivations<T> &act,
                      const LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  // Deferred: the gradient of ln_f's output [N, C]; the weight half
  // recomputes the logits' gradient from the saved probabilities.
  bool IsLoss() const override { return true; }
  ModuleSet Modules() const override { return {ModuleType::kLayerNorm, ModuleType::kEmbedding}; }
  double ForwardFlops(int64_t B, int64_t seq) const override;

  // The saved tensors, N = B*T rows:
  enum Saved {
    kLnf,      // [N, C]
    kLnfMean,  // [N] (exact)
    kLnfRstd,  // [N] (exact)
    kProbs,    // [N, V / tp] softmax of the logits (exact)
    kNumSaved,
  };

 private:
  // dlogits = d loss / d logits [N, V / tp] from the saved probabilities.
  void LogitsGradient(const LayerActivations<T> &a, const MicroBatch<T> &mb, T *dlogits) const;
  // d_lnf = dlogits wte [N, C] (summed over the group), with the wte
  // gradient's GEMM (if `weights`) while the sum runs. False on failure.
  bool LnfGradient(const LayerActivations<T> &a, const T *dlogits, T *d_lnf, bool weights,
                   const MicroBatch<T> &mb);
  void BackwardSequenceParallel(const T *in, const LayerActivations<T> &a, T *din,
                                const MicroBatch<T> &mb);
  void WeightGradientsSequenceParallel(const T *in, const LayerActivations<T> &a,
                                       const LayerActivations<T> &d, const MicroBatch<T> &mb,
                                       const T *dlogits);

  GptDims dims_;
  TensorParallelGroup tp_;
  int64_t first_ = 0, vocab_;  // this rank's vocabulary rows
  int wte_, lnf_w_, lnf_b_;
};

}  // namespace dst
