// Every layer's backward against central finite differences in double
// precision: for each model below, the analytic gradient of every parameter
// element must match (L(p + h) - L(p - h)) / 2h. The input gradients of every
// layer are covered too, since each earlier layer's parameter gradients flow
// through them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/runtime/rng.h"

namespace dst {
namespace {

struct GradCheckResult {
  double worst_rel = 0;
  std::string worst_name;
  int64_t checked = 0;
};

// Moves every parameter off its initial value (LayerNorm weights start at 1,
// biases at 0), so the check does not pass by symmetry.
void Perturb(ParamStore<double> &store, uint64_t seed) {
  for (int64_t i = 0; i < store.size(); ++i)
    store.values()[i] += 0.3 * StandardNormal(seed, 99, uint64_t(i));
}

GradCheckResult CheckAllParams(Model<double> &model, MicroBatch<double> mb) {
  ParamStore<double> &store = model.params();
  std::fill(store.grads(), store.grads() + store.size(), 0.0);
  EXPECT_TRUE(model.Forward(mb).ok());
  EXPECT_TRUE(model.Backward(mb).ok());
  std::vector<double> analytic(store.grads(), store.grads() + store.size());
  GradCheckResult result;
  const double h = 1e-5;
  for (const ParamDecl &d : store.decls()) {
    for (int64_t i = 0; i < d.numel; ++i) {
      double &p = store.values()[d.offset + i];
      const double saved = p;
      p = saved + h;
      const double up = model.Forward(mb).value();
      p = saved - h;
      const double down = model.Forward(mb).value();
      p = saved;
      const double numeric = (up - down) / (2 * h);
      const double a = analytic[d.offset + i];
      // Relative error, floored so that tiny gradients (where the finite
      // difference itself is only good to ~1e-10 absolute) do not dominate.
      const double rel = std::fabs(a - numeric) / std::max(1e-3, std::fabs(a) + std::fabs(numeric));
      if (rel > result.worst_rel) {
        result.worst_rel = rel;
        result.worst_name = d.name + "[" + std::to_string(i) + "]";
      }
      ++result.checked;
    }
  }
  return result;
}

ModelSpec Spec(const std::string &json) {
  Result<ModelSpec> spec = ParseModelSpec(json);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.value();
}

// Runs the comparison at grad_scale 1 for one model.
void ExpectGradientsMatch(const std::string &json, ActivationLimits limits, MicroBatch<double> mb) {
  const ModelSpec spec = Spec(json);
  MemoryTracker tracker;
  Model<double> model(spec, limits, &tracker);
  Perturb(model.params(), 11);
  mb.grad_scale = 1.0;
  GradCheckResult r = CheckAllParams(model, mb);
  EXPECT_LT(r.worst_rel, 1e-6) << "worst parameter " << r.worst_name << " of " << r.checked;
  EXPECT_GT(r.checked, 0);
}

// Two sequences of 5 tokens of a vocabulary of 11, one target ignored.
MicroBatch<double> FiveTokenBatch() {
  static const std::vector<int32_t> tokens = {1, 5, 9, 0, 3, 7, 2, 2, 10, 4};
  static const std::vector<int32_t> targets = {5, 9, 0, -1, 7, 2, 2, 10, 4, 6};
  MicroBatch<double> mb;
  mb.B = 2;
  mb.seq = 5;
  mb.tokens = tokens.data();
  mb.targets = targets.data();
  return mb;
}

TEST(GradCheck, GptBlocksEmbeddingAndTiedHead) {
  const MicroBatch<double> mb = FiveTokenBatch();
  ExpectGradientsMatch(
      R"({"type":"gpt","vocab_size":11,"n_ctx":6,"n_layer":2,"n_head":2,"d_model":8,"seed":3})",
      {2, 6, 1}, mb);
}

TEST(GradCheck, GptWithTwoThreadsMatchesToo) {
  std::vector<int32_t> tokens = {1, 5, 9, 0, 3, 7, 2, 2, 10, 4, 1, 0};
  std::vector<int32_t> targets = {5, 9, 0, 3, 7, 2, 2, 10, 4, 6, 0, 1};
  MicroBatch<double> mb;
  mb.B = 2;
  mb.seq = 6;
  mb.tokens = tokens.data();
  mb.targets = targets.data();
  ExpectGradientsMatch(
      R"({"type":"gpt","vocab_size":11,"n_ctx":6,"n_layer":1,"n_head":4,"d_model":8,"seed":5})",
      {2, 6, 2}, mb);
}

// LLaMA: RMSNorm, grouped-query attention with rotary embeddings (Llama
// 3.1's scaling engaged at this head size), the SiLU-gated MLP, biases, the
// head untied; and multi-query with the head tied.
TEST(GradCheck, LlamaGroupedQueryRotarySwiGlu) {
  const MicroBatch<double> mb = FiveTokenBatch();
  ExpectGradientsMatch(
      R"({"type":"llama","vocab_size":11,"hidden_size":8,"intermediate_size":12,
          "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
          "head_dim":4,"max_position_embeddings":6,"rms_norm_eps":1e-5,"rope_theta":100.0,
          "attention_bias":true,"mlp_bias":true,"seed":3,
          "rope_scaling":{"rope_type":"llama3","factor":4.0,"low_freq_factor":1.0,
                          "high_freq_factor":4.0,"original_max_position_embeddings":16}})",
      {2, 6, 1}, mb);
  ExpectGradientsMatch(
      R"({"type":"llama","vocab_size":11,"hidden_size":8,"intermediate_size":12,
          "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,
          "max_position_embeddings":6,"tie_word_embeddings":true,"seed":4})",
      {2, 6, 2}, mb);
}

// BLOOM: the embedding LayerNorm, ALiBi over three heads (not a power of
// two), the interleaved fused projection, the GELU MLP, the tied head.
TEST(GradCheck, BloomAlibiInterleavedQkv) {
  const MicroBatch<double> mb = FiveTokenBatch();
  ExpectGradientsMatch(
      R"({"type":"bloom","vocab_size":11,"hidden_size":12,"n_layer":2,"n_head":3,
          "seq_length":6,"seed":5})",
      {2, 6, 1}, mb);
}

std::vector<double> RandomVector(size_t n, uint64_t stream) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = StandardNormal(42, stream, i);
  return v;
}

TEST(GradCheck, SequentialLinearGeluLayerNormReluWithMse) {
  const int64_t B = 3, in = 5, out = 2;
  std::vector<double> inputs = RandomVector(B * in, 1);
  std::vector<double> labels = RandomVector(B * out, 2);
  MicroBatch<double> mb;
  mb.B = B;
  mb.inputs = inputs.data();
  mb.labels = labels.data();
  ExpectGradientsMatch(R"({"type":"sequential","input_dim":5,"loss":"mse","layers":[
      {"type":"linear","out_features":7},{"type":"gelu"},{"type":"layernorm"},
      {"type":"linear","out_features":6,"bias":false},{"type":"relu"},
      {"type":"linear","out_features":2}]})",
                       {B, 1, 1}, mb);
}

TEST(GradCheck, SequentialLayerNormFirstWithCrossEntropy) {
  const int64_t B = 4, in = 6;
  std::vector<double> inputs = RandomVector(B * in, 3);
  std::vector<int32_t> targets = {0, 2, -1, 1};
  MicroBatch<double> mb;
  mb.B = B;
  mb.inputs = inputs.data();
  mb.targets = targets.data();
  ExpectGradientsMatch(R"({"type":"sequential","input_dim":6,"loss":"cross_entropy","layers":[
      {"type":"layernorm"},{"type":"linear","out_features":5},{"type":"gelu"},
      {"type":"linear","out_features":3}]})",
                       {B, 1, 1}, mb);
}

TEST(GradCheck, GradScaleScalesEveryGradient) {
  const ModelSpec spec = Spec(
      R"({"type":"gpt","vocab_size":7,"n_ctx":4,"n_layer":1,"n_head":1,"d_model":4,"seed":1})");
  MemoryTracker tracker;
  Model<double> model(spec, {1, 4, 1}, &tracker);
  std::vector<int32_t> tokens = {1, 2, 3, 4}, targets = {2, 3, 4, 5};
  MicroBatch<double> mb;
  mb.B = 1;
  mb.seq = 4;
  mb.tokens = tokens.data();
  mb.targets = targets.data();
  ParamStore<double> &store = model.params();
  auto grads_at = [&](double scale) {
    std::fill(store.grads(), store.grads() + store.size(), 0.0);
    mb.grad_scale = scale;
    EXPECT_TRUE(model.Forward(mb).ok());
    EXPECT_TRUE(model.Backward(mb).ok());
    return std::vector<double>(store.grads(), store.grads() + store.size());
  };
  const std::vector<double> full = grads_at(1.0), quarter = grads_at(0.25);
  for (size_t i = 0; i < full.size(); ++i) EXPECT_NEAR(quarter[i], 0.25 * full[i], 1e-12);
}

}  // namespace
}  // namespace dst
