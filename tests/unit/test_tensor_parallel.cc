// Tensor parallelism's plan (each layer's role, the divisibility errors), a
// rank's slice of a global tensor, and the slices of every rank at every tp
// size initialising to the same global values as one rank.
#include <gtest/gtest.h>

#include <vector>

#include "core/layers/linear.h"
#include "core/layers/tp_tensors.h"
#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/model/tp_plan.h"

namespace dst {
namespace {

ModelSpec Spec(const char *text) {
  Result<ModelSpec> spec = ParseModelSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.value();
}

constexpr const char *kMlp = R"({"type":"sequential","input_dim":8,"loss":"mse","seed":3,"layers":[
    {"type":"linear","out_features":16},{"type":"relu"},{"type":"linear","out_features":16},
    {"type":"linear","out_features":8},{"type":"layernorm"},{"type":"linear","out_features":4}]})";

TEST(TensorParallelPlan, LinearsPairUpAsColumnThenRow) {
  Result<std::vector<TpRole>> roles = PlanTensorParallel(Spec(kMlp), 2);
  ASSERT_TRUE(roles.ok()) << roles.status().message();
  // linear, relu, linear | linear (before a layernorm: gathered) | layernorm | linear | loss
  const std::vector<TpRole> expected = {
      TpRole::kColumn,     TpRole::kLocalSlice,     TpRole::kRow,       TpRole::kColumnGathered,
      TpRole::kReplicated, TpRole::kColumnGathered, TpRole::kReplicated};
  EXPECT_EQ(roles.value(), expected);
  Result<std::vector<TpRole>> one = PlanTensorParallel(Spec(kMlp), 1);
  ASSERT_TRUE(one.ok());
  for (TpRole r : one.value()) EXPECT_EQ(r, TpRole::kReplicated);
}

TEST(TensorParallelPlan, ErrorsNameTheLayerAndTheNumbers) {
  Result<std::vector<TpRole>> bad = PlanTensorParallel(Spec(kMlp), 8);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("layers.5 (linear) splits its output features, 4"),
            std::string::npos)
      << bad.status().message();
  Result<std::vector<TpRole>> gpt = PlanTensorParallel(
      Spec(R"({"type":"gpt","vocab_size":64,"n_ctx":8,"n_layer":1,"n_head":2,"d_model":16})"), 4);
  ASSERT_FALSE(gpt.ok());
  EXPECT_NE(gpt.status().message().find("n_head 2 does not divide into tensor-parallel size 4"),
            std::string::npos)
      << gpt.status().message();
}

// Every tp rank's slices, put back at their global places, are the one-rank
// model's tensors bit for bit (initialisation depends on the global element).
constexpr const char *kGpt =
    R"({"type":"gpt","vocab_size":64,"n_ctx":8,"n_layer":2,"n_head":4,"d_model":16,"seed":5})";

TEST(TensorParallelPlan, GptBlocksSplitByHeads) {
  Result<std::vector<TpRole>> roles = PlanTensorParallel(Spec(kGpt), 2);
  ASSERT_TRUE(roles.ok()) << roles.status().message();
  const std::vector<TpRole> expected = {TpRole::kVocab, TpRole::kHeads, TpRole::kHeads,
                                        TpRole::kVocab};
  EXPECT_EQ(roles.value(), expected);
}

// Tensor k of a model as the global tensor (without the padding rows of a
// padded vocabulary).
std::vector<float> Global(Model<float> &model, size_t k) {
  const ParamDecl &d = model.params().decls()[k];
  std::vector<float> global(size_t(d.GlobalNumel()));
  EXPECT_TRUE(GatherTensor({}, d, model.params().values() + d.offset, global.data()).ok());
  return global;
}

class TensorParallelSlices : public ::testing::TestWithParam<const char *> {};

TEST_P(TensorParallelSlices, SlicesOfEveryRankAreTheGlobalTensors) {
  const ModelSpec spec = Spec(GetParam());
  const std::vector<ParamDecl> whole = DeclareParameters(spec);
  MemoryTracker tracker;
  const ActivationLimits limits{2, spec.IsLanguageModel() ? spec.lm.n_ctx : 1, 1};
  Model<float> one(spec, limits, &tracker);
  for (int64_t tp : {2, 4}) {
    std::vector<std::vector<float>> rebuilt(whole.size());
    for (size_t k = 0; k < whole.size(); ++k) rebuilt[k].assign(size_t(whole[k].numel), -1.0f);
    for (int64_t rank = 0; rank < tp; ++rank) {
      ModelPart part;
      part.tp = {nullptr, tp, rank};
      Model<float> slice(spec, limits, &tracker, {}, {}, part);
      const std::vector<ParamDecl> &decls = slice.params().decls();
      ASSERT_EQ(decls.size(), whole.size());
      for (size_t k = 0; k < decls.size(); ++k) {
        const float *local = slice.params().values() + decls[k].offset;
        for (int64_t i = 0; i < decls[k].numel; ++i)
          if (const int64_t g = decls[k].GlobalElement(i); g >= 0)  // (not a padding row)
            rebuilt[k][size_t(g)] = local[i];
        // SliceTensor takes the same elements back out of the global tensor.
        std::vector<float> again(size_t(decls[k].numel));
        SliceTensor(decls[k], Global(one, k).data(), again.data());
        EXPECT_EQ(again, std::vector<float>(local, local + decls[k].numel)) << decls[k].name;
      }
    }
    for (size_t k = 0; k < whole.size(); ++k)
      EXPECT_EQ(rebuilt[k], Global(one, k)) << whole[k].name << " at tp " << tp;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelSlices, ::testing::Values(kMlp, kGpt));

// A q [8 -> 8] and a k [8 -> 4] column split declared in that order.
struct QAndK {
  using Linear = ParallelLinear<float>;
  explicit QAndK(bool bias)
      : q(Linear::Split::kColumn, "q", 8, 8, Options(bias), TensorParallelGroup{}, registry),
        k(Linear::Split::kColumn, "k", 8, 4, Options(bias), TensorParallelGroup{}, registry) {}
  static Linear::Options Options(bool bias) {
    return {bias, ParamInit::Normal(0.02), ParamInit::Constant(0), 1};
  }
  ParamRegistry registry;
  Linear q, k;
};

// Separate q, k, v projections run as one GEMM only while every buffer the
// layers read them from lies back to back (the values, their bf16 copies,
// the biases and, for the backward, the gradients); with any one apart they
// run one by one.
TEST(StackedProjections, FollowOnlyWhereEveryBufferLiesBackToBack) {
  const QAndK plain(false);
  const ParallelLinear<float> &q = plain.q, &k = plain.k;
  ParamStore<float> store(plain.registry, nullptr);
  EXPECT_TRUE(k.Follows(store, q, false));
  EXPECT_TRUE(k.Follows(store, q, true));
  EXPECT_FALSE(q.Follows(store, k, false));  // the other order

  // A gradient elsewhere: the forward still stacks, the backward does not.
  std::vector<float> apart(32);
  float *grad = store.grad(k.weight_id());
  store.SetGradPointer(k.weight_id(), apart.data());
  EXPECT_TRUE(k.Follows(store, q, false));
  EXPECT_FALSE(k.Follows(store, q, true));
  store.SetGradPointer(k.weight_id(), grad);

  // bf16 copies: one of the two only, back to back, or apart.
  std::vector<uint16_t> copies(8 * 8 + 4 * 8 + 1);
  float *q_values = store.param(q.weight_id()), *k_values = store.param(k.weight_id());
  store.SetParamPointer(q.weight_id(), q_values, copies.data());
  EXPECT_FALSE(k.Follows(store, q, false));
  store.SetParamPointer(k.weight_id(), k_values, copies.data() + 8 * 8);
  EXPECT_TRUE(k.Follows(store, q, true));
  store.SetParamPointer(k.weight_id(), k_values, copies.data() + 8 * 8 + 1);
  EXPECT_FALSE(k.Follows(store, q, false));

  // With biases the registry holds q.weight, q.bias, k.weight, k.bias: the
  // weights are apart.
  const QAndK biased(true);
  ParamStore<float> biased_store(biased.registry, nullptr);
  EXPECT_FALSE(biased.k.Follows(biased_store, biased.q, false));
}

}  // namespace
}  // namespace dst
