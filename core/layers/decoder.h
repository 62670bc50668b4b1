// A pre-norm transformer decoder layer composed of the library's blocks:
//   res2 = x + attention(norm1(x));  out = res2 + mlp(norm2(res2))
// GPT-2, LLaMA and BLOOM layers are this composition with different blocks
// (LayerNorm or RMSNorm; fused, interleaved or separate q/k/v; rotary, ALiBi
// or no positions; GELU or SwiGLU MLP) and their own tensor names
// (core/model's family files choose them).
//
// Tensor parallelism is the blocks' (Megatron's layer): each rank holds its
// heads and MLP features, the norms whole. Sequence parallelism: the layer's
// input, output, norms and residual hold this rank's n = N / tp token rows;
// the regions gather them (GatherRegionInput) and leave by reduce-scatter
// (SumRowParallel), and the norms' parameter gradients, from a rank's rows,
// are summed over the group at the end of the backward.
#pragma once

#include <string>

#include "core/layers/attention.h"
#include "core/layers/layer.h"
#include "core/layers/mlp.h"
#include "core/layers/norm.h"

namespace dst {

struct DecoderConfig {
  int64_t d_model = 0;
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;
  AttentionConfig attention;
  MlpConfig mlp;
};

struct DecoderNames {
  std::string kind = "transformer_block";  // Layer::Kind (pipeline partition_method "type:")
  std::string norm1, norm2;                // without ".weight"/".bias"
  AttentionNames attention;
  MlpNames mlp;
};

template <typename T>
class DecoderLayer final : public Layer<T> {
 public:
  // Declares norm1, the attention, norm2 and the MLP, in that order.
  DecoderLayer(const DecoderConfig &config, const DecoderNames &names, ParamRegistry &registry,
               const TensorParallelGroup &tp = {});
  std::string_view Kind() const override { return kind_; }
  int64_t OutWidth() const override { return config_.d_model; }
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
  // Selective recomputation: the attention probabilities from the saved qkv.
  void RecomputeSaved(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  ModuleSet Modules() const override {
    return {NormModule(), ModuleType::kAttention, ModuleType::kLinear};
  }
  double ForwardFlops(int64_t B, int64_t seq) const override;
  int64_t KvCacheWidth() const override { return attention_.kv_width(); }

  // The saved tensors, N = B*T rows (n = N / tp under sequence parallelism),
  // W the attention's qkv width, Q its query width, F' the MLP's features:
  enum Saved {
    kOut,      // [n, C] layer output
    kLn1,      // [n, C]
    kLn1Mean,  // [n] (exact; LayerNorm only)
    kLn1Rstd,  // [n] (exact)
    kQkv,      // [N, W]
    kAtt,      // [B, H', T, T] softmax probabilities (recomputable)
    kAttY,     // [N, Q] attention output, this rank's heads merged
    kRes2,     // [n, C] residual after attention
    kLn2,      // [n, C]
    kLn2Mean,  // [n] (exact; LayerNorm only)
    kLn2Rstd,  // [n] (exact)
    kFch,      // [N, F'] GELU's input / the SwiGLU gate
    kAct,      // [N, F'] the activation's output
    kUp,       // [N, F'] SwiGLU's up projection
    kNumSaved,
  };
  // The gradients the input half keeps for the weight half (zero bubble):
  enum Deferred {
    kDOut,   // [N, C] of the MLP's output projection (every row)
    kDFch,   // [N, F'] of fc's / the gate's output
    kDLn2,   // [n, C] of norm2's output
    kDRes2,  // [N, C] of the attention's output projection (every row)
    kDQkv,   // [N, W] of the projection's output
    kDLn1,   // [n, C] of norm1's output
    kDUp,    // [N, F'] of SwiGLU's up projection
    kNumDeferred,
  };

 private:
  struct Dims {  // one micro-batch's (or the limits') sizes
    int64_t N, seq;
    int threads;
    bool probabilities;
  };
  struct ForwardScratch {
    T *whole, *partial;  // sequence-parallel: a region's gathered input, a row split's sums
  };
  struct BackwardScratch {
    T *d_whole, *gathered;  // sequence-parallel: an output gradient's rows, a region input's
    T *d_act, *d_up;        // the MLP's activation gradients
    T *d_ln;                // a region input's gradient (partial sums), or the attention output's
    T *dqkv, *unpacked;     // the projection's output gradient (separate: unpacked)
    T *att, *ln;            // the attention's [threads, T, T] and the norms' [threads, 2C] scratch
    T *tmp;                 // a further column part's input gradient
    T *norm_grads;          // sequence-parallel: both norms' parameter gradients
  };
  ForwardScratch CarveForward(ScratchCursor<T> &c, const Dims &d) const;
  BackwardScratch CarveBackward(ScratchCursor<T> &c, const Dims &d) const;
  // A backward pass's scratch (sequence-parallel: the norms' gradients zeroed).
  BackwardScratch BackwardScratchOf(const Pass<T> &pass) const;
  Dims DimsOf(const MicroBatch<T> &mb) const;
  ModuleType NormModule() const {
    return config_.norm == NormKind::kRmsNorm ? ModuleType::kRmsNorm : ModuleType::kLayerNorm;
  }
  NormSaved<T> Norm1Saved(const LayerActivations<T> &a) const {
    return {a.Op(kLn1), a[kLn1Mean], a[kLn1Rstd]};
  }
  NormSaved<T> Norm2Saved(const LayerActivations<T> &a) const {
    return {a.Op(kLn2), a[kLn2Mean], a[kLn2Rstd]};
  }
  AttentionSaved<T> AttnSaved(const LayerActivations<T> &a) const {
    return {a.Op(kQkv), a.Op(kAtt), a.Op(kAttY)};
  }
  MlpSaved<T> MlpSavedOf(const LayerActivations<T> &a) const {
    return {a.Op(kFch), a.Op(kUp), a.Op(kAct)};
  }
  // The region's input for a column split's weight gradients: the saved
  // norm output, or its rows to gather again into `gathered`.
  RegionInput<T> RegionOf(const LayerActivations<T> &a, Saved norm_out, T *gathered) const {
    return {a.Op(norm_out), a[norm_out], gathered};
  }
  // The output gradient dout [n, C] with every row (gathered into `whole`
  // under sequence parallelism, or copied when `copy`); null on failure.
  const T *WholeGradient(const Pass<T> &pass, const T *dout, T *whole, bool copy, const char *what);
  // Sequence parallelism: the norms' parameter gradients summed over the
  // group and added to the store's.
  bool SumNormGrads(const Pass<T> &pass, T *grads);
  bool Check(Status st) {
    if (st.ok()) return true;
    this->Fail(std::move(st));
    return false;
  }

  DecoderConfig config_;
  std::string kind_;
  TensorParallelGroup tp_;
  Norm<T> norm1_, norm2_;
  SelfAttention<T> attention_;
  Mlp<T> mlp_;
};

}  // namespace dst
