// Model spec parsing: what a user gets wrong is named with the fix.
#include <gtest/gtest.h>

#include <string>

#include "core/model/model_spec.h"

namespace dst {
namespace {

std::string Error(const char *text) {
  Result<ModelSpec> spec = ParseModelSpec(text);
  EXPECT_FALSE(spec.ok()) << text;
  return spec.ok() ? "" : spec.status().message();
}

TEST(ModelSpecErrors, TwoSpellingsOfOneKeyAreAnError) {
  const std::string both = Error(
      R"({"type":"gpt","vocab_size":64,"n_ctx":8,"block_size":16,"n_layer":1,"n_head":2,"d_model":16})");
  EXPECT_NE(both.find("both $.n_ctx (8) and $.block_size (16)"), std::string::npos) << both;
  const std::string dims = Error(
      R"({"type":"gpt","vocab_size":64,"n_ctx":8,"n_layer":1,"n_head":2,"d_model":16,"n_embd":32})");
  EXPECT_NE(dims.find("both $.d_model (16) and $.n_embd (32)"), std::string::npos) << dims;
  // One spelling alone is fine either way.
  EXPECT_TRUE(
      ParseModelSpec(
          R"({"type":"gpt","vocab_size":64,"block_size":8,"n_layer":1,"n_head":2,"n_embd":16})")
          .ok());
}

TEST(ModelSpecErrors, AnUnknownLayerTypeSaysSoEvenWithOtherKeys) {
  const std::string e =
      Error(R"({"type":"sequential","input_dim":4,"layers":[{"type":"conv2d","out_features":3}]})");
  EXPECT_NE(e.find("$.layers[0].type"), std::string::npos) << e;
  EXPECT_NE(e.find("\"linear\""), std::string::npos) << e;
  EXPECT_EQ(e.find("out_features"), std::string::npos) << e;  // not "unknown key out_features"
}

TEST(ModelSpecDifferences, FieldsThatChangeTheComputationAreNamed) {
  const ModelSpec a =
      ParseModelSpec(
          R"({"type":"gpt","vocab_size":64,"n_ctx":8,"n_layer":1,"n_head":2,"d_model":16,"seed":1})")
          .value();
  const ModelSpec b =
      ParseModelSpec(
          R"({"type":"gpt","vocab_size":64,"n_ctx":8,"n_layer":1,"n_head":4,"d_model":16,"seed":2})")
          .value();
  EXPECT_EQ(FirstComputationDifference(a, a), "");
  EXPECT_EQ(FirstComputationDifference(a, b), "n_head: 2 in the checkpoint, 4 here");
  const ModelSpec s1 =
      ParseModelSpec(
          R"({"type":"sequential","input_dim":4,"layers":[{"type":"linear","out_features":3}]})")
          .value();
  const ModelSpec s2 =
      ParseModelSpec(
          R"({"type":"sequential","input_dim":4,"layers":[{"type":"linear","out_features":3,"bias":false}]})")
          .value();
  EXPECT_EQ(FirstComputationDifference(s1, s2),
            "layers[0].bias: true in the checkpoint, false here");
  EXPECT_EQ(FirstComputationDifference(a, s1), "type: gpt in the checkpoint, sequential here");
}

}  // namespace
}  // namespace dst
