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

}  // namespace
}  // namespace dst
