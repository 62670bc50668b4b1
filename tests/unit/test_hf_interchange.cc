// What the Hugging Face import and export agree on without files: the
// config.json a spec exports is the same model again for every family
// (rotary scaling, grouped-query heads, biases, a Mistral's model_type and
// window, token ids kept), the family's tensor names and layouts, and
// transformers' shard sizes.
#include <gtest/gtest.h>

#include <string>

#include "core/engine/hf_export.h"
#include "core/model/family.h"

namespace dst {
namespace {

ModelSpec Parse(const std::string &text) {
  Result<ModelSpec> spec = ParseModelSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.ok() ? spec.value() : ModelSpec{};
}

TEST(HfInterchange, AnExportedConfigIsTheSameModel) {
  const std::string specs[] = {
      R"({"type":"gpt","vocab_size":64,"n_ctx":16,"n_layer":2,"n_head":4,"d_model":32})",
      R"({"type":"llama","vocab_size":64,"hidden_size":32,"intermediate_size":40,
          "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":1,
          "max_position_embeddings":64,"seq_length":16,"rms_norm_eps":1e-6,"rope_theta":500000.0,
          "attention_bias":true,"mlp_bias":true,"tie_word_embeddings":true,"bos_token_id":5,
          "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
                          "high_freq_factor":4.0,"original_max_position_embeddings":32}})",
      R"({"model_type":"mistral","vocab_size":64,"hidden_size":32,"intermediate_size":40,
          "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,
          "max_position_embeddings":32,"sliding_window":32,
          "rope_scaling":{"type":"linear","factor":2.0}})",
      R"({"type":"bloom","vocab_size":64,"hidden_size":32,"n_layer":2,"n_head":4,
          "layer_norm_epsilon":1e-5,"seq_length":16})"};
  for (const std::string &text : specs) {
    SCOPED_TRACE(text);
    const ModelSpec spec = Parse(text);
    const spec_json::Json config = HfConfigOf(spec, "bfloat16");
    EXPECT_TRUE(config.contains("model_type") && !config.contains("type"));
    EXPECT_EQ(config.at("torch_dtype"), "bfloat16");
    const ModelSpec again = Parse(config.dump());
    EXPECT_EQ(FirstComputationDifference(spec, again), "");
    EXPECT_EQ(again.lm.n_ctx, spec.lm.n_ctx);  // the longest sequence trained
  }
  const spec_json::Json llama = HfConfigOf(Parse(specs[1]), "float32");
  EXPECT_EQ(llama.at("bos_token_id"), 5);
  EXPECT_EQ(llama.at("max_position_embeddings"), 64);  // not the trained seq_length
  EXPECT_EQ(llama.at("architectures")[0], "LlamaForCausalLM");
  const spec_json::Json mistral = HfConfigOf(Parse(specs[2]), "float32");
  EXPECT_EQ(mistral.at("model_type"), "mistral");
  EXPECT_EQ(mistral.at("sliding_window"), 32);
}

TEST(HfInterchange, NamesAndLayouts) {
  const ModelSpec gpt =
      Parse(R"({"type":"gpt","vocab_size":64,"n_ctx":16,"n_layer":1,"n_head":4,"d_model":32})");
  EXPECT_TRUE(HfTensorOf(gpt, "transformer.h.0.attn.c_attn.weight").transposed);
  EXPECT_TRUE(HfTensorOf(gpt, "transformer.h.0.mlp.c_proj.weight").transposed);
  EXPECT_FALSE(HfTensorOf(gpt, "transformer.h.0.attn.c_attn.bias").transposed);
  EXPECT_FALSE(HfTensorOf(gpt, "transformer.wte.weight").transposed);
  EXPECT_TRUE(HfIgnorable(gpt, "h.0.attn.bias"));
  EXPECT_TRUE(HfIgnorable(gpt, "transformer.h.3.attn.masked_bias"));
  EXPECT_TRUE(HfIgnorable(gpt, "lm_head.weight"));  // tied
  EXPECT_FALSE(HfIgnorable(gpt, "transformer.h.0.attn.c_attn.bias"));
  EXPECT_EQ(HfAliases("model.norm.weight"),
            (std::vector<std::string>{"model.norm.weight", "norm.weight"}));
  EXPECT_EQ(HfAliases("lm_head.weight"), std::vector<std::string>{"lm_head.weight"});
  const ModelSpec untied = Parse(
      R"({"type":"llama","vocab_size":64,"hidden_size":32,"intermediate_size":40,
          "num_hidden_layers":1,"num_attention_heads":4})");
  EXPECT_FALSE(HfIgnorable(untied, "lm_head.weight"));
  EXPECT_TRUE(HfIgnorable(untied, "model.layers.0.self_attn.rotary_emb.inv_freq"));
}

TEST(HfInterchange, ShardSizesAsTransformersReadsThem) {
  EXPECT_EQ(ParseShardSize("5GB").value(), 5'000'000'000);
  EXPECT_EQ(ParseShardSize("500MB").value(), 500'000'000);
  EXPECT_EQ(ParseShardSize("2GiB").value(), int64_t(2) << 30);
  EXPECT_EQ(ParseShardSize("1.5kb").value(), 1500);
  EXPECT_EQ(ParseShardSize("12345").value(), 12345);
  for (const char *bad : {"", "GB", "0", "5 GB", "-1MB", "5XB", "0.1B"})
    EXPECT_EQ(ParseShardSize(bad).status().code(), Code::kInvalidArgument) << bad;
}

}  // namespace
}  // namespace dst
