// The language-model head as a layer: the final norm, the logits of a
// vocabulary-parallel column split (its own lm_head weight, or tied to the
// token embedding's: a pipeline's last stage then holds its own copy, whose
// gradient the engine sums with the embedding's), and the mean
// cross-entropy over the targets that are not -1. With tensor parallelism a
// rank computes the logits of its vocabulary rows only, the cross-entropy
// is assembled across ranks (vocab_parallel.h), and the input gradient's
// partial sums are summed while the weight gradient's GEMM runs.
// Sequence-parallel: the norm runs on this rank's rows, its output is
// gathered for the logits, and the input gradient reduce-scattered.
#pragma once

#include <string>

#include "core/layers/norm.h"
#include "core/layers/scratch.h"

namespace dst {

struct LmHeadConfig {
  int64_t vocab = 0;         // rows of the output weight
  int64_t padded_vocab = 0;  // rows held with padding (divisible by tp); 0: vocab
  int64_t d_model = 0;
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;
  ParamInit init = ParamInit::Normal(0.02);  // an untied weight's
  int64_t Held() const { return padded_vocab > 0 ? padded_vocab : vocab; }
  int64_t Padding() const { return Held() != vocab ? Held() : 0; }  // TensorSplit::padded
};

struct LmHeadNames {
  std::string norm;    // without ".weight"/".bias"
  std::string weight;  // the tied embedding's (a stage's copy) or the untied lm_head's, without ".weight"
  std::string kind = "lm_head";  // Layer::Kind
};

template <typename T>
class LmHead final : public Layer<T> {
 public:
  // tied_wte: the embedding's wte id when it is in this model part; -1 when
  // tied but elsewhere (this part declares its own copy), or untied (`tied` false).
  LmHead(const LmHeadConfig &config, const LmHeadNames &names, bool tied, int tied_wte,
         ParamRegistry &registry, const TensorParallelGroup &tp = {});
  std::string_view Kind() const override { return kind_; }
  int64_t OutWidth() const override { return 0; }
  std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &limits) const override;
  int64_t ScratchSize(const ActivationLimits &limits) const override;
  void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                const MicroBatch<T> &mb) override;
  // Deferred: the gradient of the norm's output [n, C]; the weight half
  // recomputes the logits' gradient from the saved probabilities.
  std::vector<SavedTensorSpec> DeferredTensors(const ActivationLimits &limits) const override;
  void BackwardInput(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                     LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  void BackwardWeight(const T *in, const LayerActivations<T> &act,
                      const LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  bool IsLoss() const override { return true; }
  bool DefersLoss() const override { return true; }
  ModuleSet Modules() const override { return {NormModule(), OutputModule()}; }
  double ForwardFlops(int64_t B, int64_t seq) const override;

  enum Saved {
    kLnf,      // [n, C]
    kLnfMean,  // [n] (exact; LayerNorm only)
    kLnfRstd,  // [n] (exact)
    kProbs,    // [N, V / tp] softmax of the logits (exact)
    kNumSaved,
  };

 private:
  struct Scratch {
    T *dlogits, *d_lnf, *ln, *gathered, *norm_grads;
  };
  Scratch Carve(ScratchCursor<T> &c, int64_t N, int threads) const;
  // A pass's scratch (sequence-parallel: the norm's gradients zeroed;
  // otherwise norm_grads is null and the norm writes the store's).
  Scratch ScratchOf(const Pass<T> &pass) const;
  void SumNormGrads(const Pass<T> &pass, T *grads);
  // mb.last_logits_only: [B, V] of each sequence's last row into mb.logits.
  void LastLogits(const T *in, LayerActivations<T> &a, const MicroBatch<T> &mb);
  ModuleType NormModule() const {
    return config_.norm == NormKind::kRmsNorm ? ModuleType::kRmsNorm : ModuleType::kLayerNorm;
  }
  // The tied weight multiplies as the embedding it is; an own lm_head as a linear.
  ModuleType OutputModule() const { return tied_ ? ModuleType::kEmbedding : ModuleType::kLinear; }
  NormSaved<T> NormSavedOf(const LayerActivations<T> &a) const {
    return {Operand<T>::Of(a[kLnf]), a[kLnfMean], a[kLnfRstd]};
  }
  ColumnParts<T> Parts(const T *dlogits) const { return {{&output_, dlogits}}; }
  // The norm's output: the region input (gathered again under sequence parallelism).
  RegionInput<T> Input(const LayerActivations<T> &a, T *gathered) const {
    return {Operand<T>::Of(a[kLnf]), a[kLnf], gathered};
  }
  // dlogits = d loss / d logits [N, V / tp] from the saved probabilities.
  void LogitsGradient(const LayerActivations<T> &a, const MicroBatch<T> &mb, T *dlogits) const;
  bool Check(Status st) {
    if (st.ok()) return true;
    this->Fail(std::move(st));
    return false;
  }

  LmHeadConfig config_;
  std::string kind_;
  TensorParallelGroup tp_;
  bool tied_ = true;
  int64_t first_ = 0, vocab_ = 0;  // this rank's vocabulary rows
  int64_t valid_ = 0;              // of them, the real vocabulary's (the rest padding)
  Norm<T> norm_;
  ParallelLinear<T> output_;
};

}  // namespace dst
