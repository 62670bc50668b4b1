// Choosing the next token from a model's logits, as Hugging Face's
// generate() does with do_sample: the logits divided by the temperature,
// then only the top_k largest kept, then only the smallest set of the most
// probable tokens whose probability reaches top_p, then one draw from the
// softmax of what is left. Temperature 0 is greedy decoding (the argmax;
// the lowest id among equal logits). The draw for the n-th generated token
// is a pure function of (seed, n): the same seed gives the same tokens
// wherever it runs (C, Python, Rust, the CLI).
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/status.h"

namespace dst {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // 1: every token
  uint64_t seed = 0;
};

// Temperature >= 0 and finite, top_k >= 0, 0 < top_p <= 1; errors name the
// value and the range.
Status CheckSampling(const SamplingOptions &options);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions &options) : options_(options) {}
  // The token for logits [V] as the n-th generated token (n counts from 0).
  int32_t Next(const float *logits, int64_t V, uint64_t n);

 private:
  SamplingOptions options_;
  std::vector<int32_t> order_;  // candidate ids, most probable first
  std::vector<double> probs_;
};

}  // namespace dst
