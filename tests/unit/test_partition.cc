// Stage partitioning and model parts: every method cuts the layers into
// non-empty contiguous parts minimising the heaviest one, errors name the
// problem, and a stage built from a part of the model starts from exactly the
// whole model's values (the tied wte copy on the last stage included).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/pipeline/partition.h"

namespace dst {
namespace {

std::vector<LayerCost> Layers(const std::vector<std::pair<std::string, int64_t>> &kinds) {
  std::vector<LayerCost> out;
  for (const auto &[kind, params] : kinds) out.push_back({kind, params, double(params)});
  return out;
}

TEST(Partition, UniformSplitsLayerCountsEarlyStagesLighter) {
  const auto layers = Layers({{"a", 1}, {"a", 1}, {"a", 1}, {"a", 1}, {"a", 1}});
  Result<std::vector<size_t>> two = PartitionLayers(layers, 2, "uniform");
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(two.value(), (std::vector<size_t>{0, 2, 5}));
  Result<std::vector<size_t>> five = PartitionLayers(layers, 5, "uniform");
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(five.value(), (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
}

TEST(Partition, ParametersAndCostBalanceTheHeaviestPart) {
  const auto layers = Layers({{"emb", 100}, {"relu", 0}, {"lin", 1}, {"lin", 100}});
  Result<std::vector<size_t>> p = PartitionLayers(layers, 2, "parameters");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.value(), (std::vector<size_t>{0, 1, 4}));  // every cut gives 101: the earliest
  Result<std::vector<size_t>> c = PartitionLayers(layers, 3, "cost");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().front(), 0u);
  EXPECT_EQ(c.value().back(), 4u);
  for (size_t k = 0; k + 1 < c.value().size(); ++k) EXPECT_LT(c.value()[k], c.value()[k + 1]);
}

TEST(Partition, TypeRegexBalancesMatchingLayers) {
  const auto layers = Layers({{"gpt_embedding", 10},
                              {"gpt_transformer_block", 5},
                              {"gpt_transformer_block", 5},
                              {"gpt_transformer_block", 5},
                              {"gpt_transformer_block", 5},
                              {"gpt_head", 1}});
  Result<std::vector<size_t>> t = PartitionLayers(layers, 2, "type:Transformer");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t.value(), (std::vector<size_t>{0, 3, 6}));  // two blocks each
  Result<std::vector<size_t>> none = PartitionLayers(layers, 2, "type:conv");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("gpt_transformer_block"), std::string::npos);
  Result<std::vector<size_t>> bad = PartitionLayers(layers, 2, "type:(");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not a valid regular expression"), std::string::npos);
}

TEST(Partition, MoreStagesThanLayersIsAnErrorWithTheNumbers) {
  Result<std::vector<size_t>> r = PartitionLayers(Layers({{"a", 1}, {"b", 1}}), 3, "uniform");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("2 layers"), std::string::npos);
  EXPECT_NE(r.status().message().find("3 pipeline stages"), std::string::npos);
}

ModelSpec TinyGpt() {
  Result<ModelSpec> spec = ParseModelSpec(R"({"type": "gpt", "vocab_size": 64, "n_ctx": 8,
      "n_layer": 3, "n_head": 2, "d_model": 16, "seed": 3})");
  EXPECT_TRUE(spec.ok());
  return spec.value();
}

std::vector<float> Tensor(Model<float> &m, const std::string &name) {
  const int id = m.params().Find(name);
  EXPECT_GE(id, 0) << name;
  const ParamDecl &d = m.params().decls()[size_t(id)];
  return std::vector<float>(m.params().param(id), m.params().param(id) + d.numel);
}

TEST(ModelPart, StagesStartFromTheWholeModelsValues) {
  const ModelSpec spec = TinyGpt();
  ActivationLimits limits;
  limits.max_B = 1;
  limits.max_T = 8;
  Model<float> whole(spec, limits, nullptr);
  // Stage 0: embedding + block 0; stage 1: blocks 1, 2 + head (own wte copy).
  Model<float> first(spec, limits, nullptr, {}, {}, ModelPart{{{0, 2}}, {}});
  Model<float> last(spec, limits, nullptr, {}, {}, ModelPart{{{2, 5}}, {}});
  EXPECT_EQ(first.layers().size(), 2u);
  EXPECT_EQ(last.layers().size(), 3u);
  EXPECT_EQ(last.global_layer(0), 2u);
  EXPECT_TRUE(last.has_loss());
  EXPECT_FALSE(first.has_loss());
  EXPECT_EQ(Tensor(first, "transformer.wte.weight"), Tensor(whole, "transformer.wte.weight"));
  EXPECT_EQ(Tensor(last, "transformer.wte.weight"), Tensor(whole, "transformer.wte.weight"));
  EXPECT_EQ(Tensor(first, "transformer.h.0.mlp.c_fc.weight"),
            Tensor(whole, "transformer.h.0.mlp.c_fc.weight"));
  EXPECT_EQ(Tensor(last, "transformer.h.2.attn.c_attn.weight"),
            Tensor(whole, "transformer.h.2.attn.c_attn.weight"));
  EXPECT_EQ(last.params().Find("transformer.h.0.ln_1.weight"), -1);
  EXPECT_EQ(first.params().Find("transformer.ln_f.weight"), -1);
  // Interleaved: two chunks on one rank run as two local ranges.
  Model<float> chunks(spec, limits, nullptr, {}, {}, ModelPart{{{0, 1}, {3, 4}}, {}});
  ASSERT_EQ(chunks.num_chunks(), 2u);
  EXPECT_EQ(chunks.chunk(1).begin, 1u);
  EXPECT_EQ(chunks.global_layer(1), 3u);
  EXPECT_EQ(chunks.InWidth(1), 16);
  EXPECT_EQ(chunks.InWidth(0), 0);  // the embedding reads tokens
}

}  // namespace
}  // namespace dst
