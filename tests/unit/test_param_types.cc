// zero_allowed_param_types / zero_force_param_types: every tensor of a GPT
// and of a sequential model maps onto its layer type, and the whole-tensor
// mask follows the forced and allowed lists; the partition plan keeps those
// tensors in its persistent region.
#include "core/zero/param_types.h"

#include <gtest/gtest.h>

#include <map>

#include "core/model/model.h"
#include "core/zero/partition_plan.h"

namespace dst {
namespace {

ModelSpec Spec(const char *json) {
  Result<ModelSpec> spec = ParseModelSpec(json);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.value();
}

TEST(ParamTypes, EveryGptTensorHasItsLayerType) {
  const ModelSpec spec = Spec(
      R"({"type": "gpt", "vocab_size": 64, "n_ctx": 8, "n_layer": 2, "n_head": 2, "d_model": 8})");
  std::map<std::string, int64_t> elements;
  for (const ParamDecl &d : DeclareParameters(spec)) {
    const std::string type = ZeroParamTypeOf(spec, d.name);
    EXPECT_FALSE(type.empty()) << d.name;
    elements[type] += d.numel;
  }
  EXPECT_EQ(elements["Embedding"], 64 * 8 + 8 * 8);
  EXPECT_EQ(elements["LayerNorm"], 2 * 4 * 8 + 2 * 8);
  EXPECT_EQ(elements["Attention"], 2 * (3 * 8 * 8 + 3 * 8 + 8 * 8 + 8));
  EXPECT_EQ(elements["Linear"], 2 * (4 * 8 * 8 + 4 * 8 + 8 * 4 * 8 + 8));
}

// LLaMA: RMSNorm weights are "RMSNorm" (an fp32 module or whole-type of its
// own), the untied lm_head a "Linear" as nn.Linear is; BLOOM: its embedding
// LayerNorm is a "LayerNorm".
TEST(ParamTypes, EveryLlamaAndBloomTensorHasItsLayerType) {
  const ModelSpec llama = Spec(
      R"({"type": "llama", "vocab_size": 64, "hidden_size": 8, "intermediate_size": 12,
          "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1})");
  std::map<std::string, int64_t> elements;
  for (const ParamDecl &d : DeclareParameters(llama)) {
    const std::string type = ZeroParamTypeOf(llama, d.name);
    EXPECT_FALSE(type.empty()) << d.name;
    elements[type] += d.numel;
  }
  EXPECT_EQ(elements["Embedding"], 64 * 8);
  EXPECT_EQ(elements["RMSNorm"], 2 * 2 * 8 + 8);
  EXPECT_EQ(elements["Attention"], 2 * (8 * 8 + 2 * 4 * 8 + 8 * 8));
  EXPECT_EQ(elements["Linear"], 2 * 3 * 8 * 12 + 64 * 8);  // the MLPs and lm_head
  const ModelSpec bloom =
      Spec(R"({"type": "bloom", "vocab_size": 64, "hidden_size": 8, "n_layer": 2, "n_head": 2})");
  elements.clear();
  for (const ParamDecl &d : DeclareParameters(bloom)) {
    const std::string type = ZeroParamTypeOf(bloom, d.name);
    EXPECT_FALSE(type.empty()) << d.name;
    elements[type] += d.numel;
  }
  EXPECT_EQ(elements["Embedding"], 64 * 8);
  EXPECT_EQ(elements["LayerNorm"], 2 * 8 + 2 * 4 * 8 + 2 * 8);
  EXPECT_EQ(elements["Attention"], 2 * (3 * 8 * 8 + 3 * 8 + 8 * 8 + 8));
  EXPECT_EQ(elements["Linear"], 2 * (4 * 8 * 8 + 4 * 8 + 8 * 4 * 8 + 8));
}

TEST(ParamTypes, SequentialTensorsAndTheWholeMask) {
  const ModelSpec spec = Spec(R"({"type": "sequential", "input_dim": 4, "loss": "mse",
      "layers": [{"type": "linear", "out_features": 8}, {"type": "relu"},
                 {"type": "layernorm"}, {"type": "linear", "out_features": 1}]})");
  const std::vector<ParamDecl> decls = DeclareParameters(spec);
  std::vector<std::string> types;
  for (const ParamDecl &d : decls) types.push_back(ZeroParamTypeOf(spec, d.name));
  EXPECT_EQ(types, (std::vector<std::string>{"Linear", "Linear", "LayerNorm", "LayerNorm", "Linear",
                                             "Linear"}));
  EXPECT_EQ(WholeByParamType(spec, decls, {}, {}), std::vector<bool>(decls.size(), false));
  const std::vector<bool> forced = WholeByParamType(spec, decls, {}, {"LayerNorm"});
  EXPECT_EQ(forced, (std::vector<bool>{false, false, true, true, false, false}));
  EXPECT_EQ(WholeByParamType(spec, decls, {"LayerNorm"}, {}),
            (std::vector<bool>{true, true, false, false, true, true}));
  // The plan keeps the whole tensors in its persistent region.
  EXPECT_EQ(PersistentElements(decls, 0, forced), 16);
  EXPECT_EQ(PersistentTensors(decls, -1, forced), (std::vector<int>{2, 3}));
}

ModuleType ModuleOf(const std::string &type) {
  for (ModuleType m : {ModuleType::kEmbedding, ModuleType::kLayerNorm, ModuleType::kAttention,
                       ModuleType::kLinear})
    if (ModuleName(m) == type) return m;
  return ModuleType::kWhole;
}

// Each layer's Modules() are exactly the types of the tensors it reads, so
// a layer made only of listed types (fp16_override_modules) keeps its
// output in fp32 exactly when every tensor it reads is fp32.
TEST(ParamTypes, EachLayerDeclaresTheTypesOfItsTensors) {
  for (const char *json :
       {R"({"type": "gpt", "vocab_size": 64, "n_ctx": 8, "n_layer": 2, "n_head": 2, "d_model": 8})",
        R"({"type": "sequential", "input_dim": 4, "loss": "mse",
            "layers": [{"type": "linear", "out_features": 8}, {"type": "relu"},
                       {"type": "layernorm"}, {"type": "linear", "out_features": 1}]})"}) {
    const ModelSpec spec = Spec(json);
    MemoryTracker tracker;
    Model<float> model(spec, ActivationLimits{}, &tracker);
    const std::vector<ParamDecl> &decls = model.params().decls();
    for (size_t i = 0; i < model.layers().size(); ++i) {
      ModuleSet read;
      for (int id : model.layer_params()[i].ids)
        read.add(ModuleOf(ZeroParamTypeOf(spec, decls[size_t(id)].name)));
      EXPECT_TRUE(read == model.layers()[i]->Modules()) << json << " layer " << i;
    }
  }
}

// The tensors kept in fp32 leave every staged region: gradients, the shared
// (tied) region, stage 3's gathers and its persistent tensors.
TEST(ParamTypes, Fp32TensorsLeaveThePartitionPlan) {
  const ModelSpec spec = Spec(
      R"({"type": "gpt", "vocab_size": 64, "n_ctx": 8, "n_layer": 2, "n_head": 2, "d_model": 8})");
  MemoryTracker tracker;
  Model<float> model(spec, ActivationLimits{}, &tracker);
  const std::vector<ParamDecl> &decls = model.params().decls();
  const std::vector<bool> fp32 = Fp32ByParamType(spec, decls, {"LayerNorm", "Embedding"});
  int64_t fp32_elements = 0;
  for (size_t k = 0; k < decls.size(); ++k) fp32_elements += fp32[k] ? decls[k].numel : 0;
  EXPECT_EQ(fp32_elements, 2 * 4 * 8 + 2 * 8 + 128 * 8 + 8 * 8);  // wte: 64 rows padded to 128
  const PartitionPlan plan = BuildPartitionPlan(decls, model.layer_params(), 16, {}, fp32);
  EXPECT_EQ(plan.fp32.size, fp32_elements);
  EXPECT_TRUE(plan.shared.slots.empty());  // the tied wte is fp32
  auto staged = [&](const std::vector<StagingLayout> &layouts, int id) {
    for (const StagingLayout &l : layouts)
      for (const TensorSlot &s : l.slots)
        if (s.id == id) return true;
    return false;
  };
  for (size_t k = 0; k < decls.size(); ++k) {
    const int id = int(k);
    EXPECT_EQ(staged(plan.grads, id), !fp32[k]) << decls[k].name;
    EXPECT_FALSE(fp32[k] && staged(plan.params, id)) << decls[k].name;
    EXPECT_FALSE(fp32[k] && staged({plan.persistent}, id)) << decls[k].name;
  }
  EXPECT_EQ(PersistentElements(decls, 16, {}, fp32),
            PersistentElements(decls, 16) - (2 * 4 * 8 + 2 * 8));  // the LayerNorms left it
}

}  // namespace
}  // namespace dst
