#include "core/generation/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/runtime/rng.h"

namespace dst {

namespace {

constexpr uint64_t kSamplingStream = 0x73616d706c65ULL;  // "sample"

int32_t Argmax(const float *logits, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

}  // namespace

Status CheckSampling(const SamplingOptions &o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    return InvalidArgument("temperature " + std::to_string(o.temperature) +
                           ": expected a finite value >= 0 (0: greedy decoding)");
  if (o.top_k < 0)
    return InvalidArgument("top_k " + std::to_string(o.top_k) +
                           ": expected >= 0 (0: no top-k filtering)");
  if (!(o.top_p > 0 && o.top_p <= 1))
    return InvalidArgument("top_p " + std::to_string(o.top_p) +
                           ": expected a value in (0, 1] (1: no nucleus filtering)");
  return Status::Ok();
}

int32_t Sampler::Next(const float *logits, int64_t V, uint64_t n) {
  if (options_.temperature == 0) return Argmax(logits, V);
  // Candidates by descending logit (ties: lower id first), cut to top_k.
  order_.resize(size_t(V));
  for (int64_t i = 0; i < V; ++i) order_[size_t(i)] = int32_t(i);
  const auto higher = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t kept = V;
  if (options_.top_k > 0 && options_.top_k < V) {
    kept = options_.top_k;
    std::partial_sort(order_.begin(), order_.begin() + kept, order_.end(), higher);
  } else {
    std::sort(order_.begin(), order_.end(), higher);
  }
  // Softmax of logits / temperature over the candidates, in double.
  const double inv_t = 1.0 / options_.temperature;
  const double top = double(logits[order_[0]]) * inv_t;
  probs_.resize(size_t(kept));
  double sum = 0;
  for (int64_t i = 0; i < kept; ++i) {
    probs_[size_t(i)] = std::exp(double(logits[order_[size_t(i)]]) * inv_t - top);
    sum += probs_[size_t(i)];
  }
  // Nucleus: a token stays while the mass of the ones before it is below top_p.
  if (options_.top_p < 1) {
    double before = 0;
    int64_t nucleus = 0;
    while (nucleus < kept && before < options_.top_p * sum) before += probs_[size_t(nucleus++)];
    kept = std::max<int64_t>(nucleus, 1);
    sum = 0;
    for (int64_t i = 0; i < kept; ++i) sum += probs_[size_t(i)];
  }
  const double u = UniformOpen(HashKey(options_.seed, kSamplingStream, n)) * sum;
  double acc = 0;
  for (int64_t i = 0; i < kept; ++i) {
    acc += probs_[size_t(i)];
    if (u < acc) return order_[size_t(i)];
  }
  return order_[size_t(kept - 1)];
}

}  // namespace dst
