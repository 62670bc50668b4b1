// Text generation from a trained model: a single-rank copy of the model in
// host memory (any training layout's checkpoint loads into it: its
// consolidated weights; or a Hugging Face directory's weights), run forward
// over a key/value cache (core/model/kv_cache.h) so that each new token
// costs one position, and a Sampler choosing the tokens. What `dstrain
// generate` and `dstrain eval`, dst_generator_* and the SDKs run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/common/status.h"
#include "core/generation/sampler.h"
#include "core/model/model.h"

namespace dst {

struct GeneratorOptions {
  std::string checkpoint;  // a dstrain checkpoint directory (any layout), or
  std::string tag;         //   its tag ("": its latest)
  std::string model;       // a model: a Hugging Face directory (its weights), a
                           //   spec file or JSON text (the spec's seeded weights)
  int64_t context = 0;     // positions a sequence may fill (prompt + new tokens); 0: the model's
  int64_t batch = 1;       // sequences one forward may carry (Logits, Loss)
  int threads = 0;         // 0: DSTRAIN_NUM_THREADS, OMP_NUM_THREADS, else the cores
  std::string precision = "fp32";  // "bf16": weights rounded to bf16, GEMMs in bf16 where fast
};

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  bool use_cache = true;  // false: the whole sequence forward again for every token
  // Stop at one of the model's end-of-sequence ids (config.json /
  // generation_config.json eos_token_id).
  bool stop_at_eos = true;
};

enum class StopReason { kLength, kEos, kContext, kCaller };
const char *StopReasonName(StopReason reason);  // "length", "eos", "context", "caller"

struct Generated {
  std::vector<int32_t> tokens;  // the new tokens (not the prompt)
  StopReason stop = StopReason::kLength;
};

class Generator {
 public:
  static Result<std::unique_ptr<Generator>> Open(const GeneratorOptions &options);

  const ModelSpec &spec() const { return model_->spec(); }
  int64_t vocab() const { return spec().lm.vocab; }
  int64_t context() const { return context_; }
  int64_t batch() const { return batch_; }
  const std::set<int32_t> &eos() const { return eos_; }

  // logits [B, T, vocab] of every position of B sequences of T tokens (a
  // forward from position 0; B <= batch, T <= context).
  Status Logits(const int32_t *tokens, int64_t B, int64_t T, float *logits);
  // The mean next-token cross-entropy of B sequences of T tokens (targets
  // [B, T], -1 ignored) and how many targets counted.
  Result<double> Loss(const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T,
                      int64_t *counted);
  // Continues `prompt`: each new token goes to on_token as it is chosen
  // (returning false stops). Stops after max_new_tokens, at an end-of-sequence
  // id, or when the context is full.
  Result<Generated> Generate(const std::vector<int32_t> &prompt, const GenerateOptions &options,
                             const std::function<bool(int32_t)> &on_token = {});

 private:
  Generator() = default;
  // Loads the weights the options name into model_.
  Status LoadWeights(const GeneratorOptions &options);
  Status CheckTokens(const int32_t *tokens, int64_t n, const char *what) const;
  // Runs tokens [B, T] forward over the cache from its length, which then
  // advances by T; logits as MicroBatch::logits (last_only: [B, V]).
  Status Forward(const int32_t *tokens, const int32_t *targets, int64_t B, int64_t T, float *logits,
                 bool last_only, double *loss = nullptr);

  MemoryTracker tracker_;
  std::unique_ptr<Model<float>> model_;
  std::unique_ptr<KvCache<float>> cache_;
  std::vector<uint16_t> weights16_;  // bf16: the weights' copies the GEMMs read
  int64_t context_ = 0, batch_ = 1;
  std::set<int32_t> eos_;
  std::vector<float> step_logits_;
};

}  // namespace dst
