// The token embedding as a layer, vocabulary-parallel (Megatron's
// VocabParallelEmbedding): x[b, t] = wte[token[b, t]] (+ wpe[t], GPT-2's
// learned positions) (then a LayerNorm: BLOOM's word_embeddings_layernorm).
// With tensor parallelism a rank holds wte rows [r V/tp, (r+1) V/tp) and
// looks up the tokens among them (zeros for the others); the ranks' lookups
// are summed (all-reduce), then the positions added once. Sequence-parallel:
// the sum is reduce-scattered, so the rank keeps its rows
// (sequence_parallel.h), and the positions and the norm apply to those.
#pragma once

#include <optional>
#include <string>

#include "core/layers/norm.h"

namespace dst {

struct EmbeddingConfig {
  int64_t vocab = 0;    // rows of wte
  int64_t padded_vocab = 0;  // rows held with padding (divisible by tp); 0: vocab
  int64_t d_model = 0;
  int64_t n_ctx = 0;     // rows of wpe (learned positions)
  bool positions = false;
  bool norm = false;     // a LayerNorm after the lookup
  double norm_eps = 1e-5;
  ParamInit init = ParamInit::Normal(0.02);
  int64_t Held() const { return padded_vocab > 0 ? padded_vocab : vocab; }
  int64_t Padding() const { return Held() != vocab ? Held() : 0; }  // TensorSplit::padded
};

struct EmbeddingNames {
  std::string wte, wpe, norm;  // wte, wpe: whole tensor names; norm without ".weight"
  std::string kind = "embedding";  // Layer::Kind
};

template <typename T>
class TokenEmbedding final : public Layer<T> {
 public:
  TokenEmbedding(const EmbeddingConfig &config, const EmbeddingNames &names,
                 ParamRegistry &registry, const TensorParallelGroup &tp = {});
  std::string_view Kind() const override { return kind_; }
  int64_t OutWidth() const override { return config_.d_model; }
  // Its output [B, T, C] (sequence-parallel: this rank's rows); with the norm
  // also the lookup and the norm's statistics.
  std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &limits) const override;
  int64_t ScratchSize(const ActivationLimits &limits) const override;
  void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                const MicroBatch<T> &mb) override;
  // Deferred: the output gradient (the input half has nothing to do).
  std::vector<SavedTensorSpec> DeferredTensors(const ActivationLimits &limits) const override;
  void BackwardInput(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                     LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  void BackwardWeight(const T *in, const LayerActivations<T> &act,
                      const LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  ModuleSet Modules() const override {
    return config_.norm ? ModuleSet{ModuleType::kEmbedding, ModuleType::kLayerNorm}
                        : ModuleSet{ModuleType::kEmbedding};
  }
  double ForwardFlops(int64_t, int64_t) const override { return 0.0; }
  int wte_id() const { return wte_; }

  enum Saved { kOut, kLookup, kMean, kRstd, kNumSaved };

 private:
  // The looked-up rows (every rank's lookups summed; sequence-parallel: this
  // rank's rows) into `out` [n, C], positions added. False on failure.
  bool Lookup(const Pass<T> &pass, T *out);
  const T *Positions(const Pass<T> &pass) const;

  EmbeddingConfig config_;
  std::string kind_;
  TensorParallelGroup tp_;
  int64_t first_ = 0, rows_ = 0;  // this rank's vocabulary rows of wte
  int wte_ = -1, wpe_ = -1;
  Norm<T> norm_;
};

}  // namespace dst
