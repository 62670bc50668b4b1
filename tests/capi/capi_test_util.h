// Helpers shared by the C ABI tests: tiny models, configs and batches.
#pragma once

#include <dstrain/dstrain.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dst_test {

inline const char *kTinyGpt =
    R"({"type":"gpt","vocab_size":256,"n_ctx":16,"n_layer":2,"n_head":2,"d_model":32,"seed":7})";

inline std::string AdamWConfig(int micro = 2, int accum = 1, const std::string &extra = "") {
  return R"({"train_micro_batch_size_per_gpu":)" + std::to_string(micro) +
         R"(,"gradient_accumulation_steps":)" + std::to_string(accum) +
         R"(,"optimizer":{"type":"AdamW","params":{"lr":0.003,"betas":[0.9,0.95],"weight_decay":0.1}},
         "gradient_clipping":1.0,"dstrain":{"num_threads":1})" +
         extra + "}";
}

// Creates an engine or fails the test with the library's message.
inline dst_engine_t *CreateEngine(const std::string &config, const std::string &model) {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.config_json = config.c_str();
  opts.model_json = model.c_str();
  dst_engine_t *engine = nullptr;
  const dst_status_t st = dst_engine_create(&engine, &opts);
  if (st != DST_OK) ADD_FAILURE() << "dst_engine_create: " << dst_last_error();
  return engine;
}

// Deterministic GPT batch: a repeating pattern a model can learn.
struct TokenBatch {
  std::vector<int32_t> tokens, targets;
  dst_batch_t batch;
  TokenBatch(size_t n_samples, size_t seq_len, uint32_t seed) {
    tokens.resize(n_samples * seq_len);
    targets.resize(n_samples * seq_len);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t s = 0; s < n_samples; ++s) {
      x = x * 1664525u + 1013904223u;
      const int32_t start = int32_t((x >> 8) % 200);
      for (size_t t = 0; t < seq_len; ++t) {
        tokens[s * seq_len + t] = (start + int32_t(t) * 3) % 256;
        targets[s * seq_len + t] = (start + int32_t(t + 1) * 3) % 256;
      }
    }
    dst_batch_default(&batch);
    batch.n_samples = n_samples;
    batch.seq_len = seq_len;
    batch.tokens = tokens.data();
    batch.tokens_count = tokens.size();
    batch.targets = targets.data();
    batch.targets_count = targets.size();
  }
};

}  // namespace dst_test
