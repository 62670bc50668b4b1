// Model spec parsing: what a user gets wrong is named with the fix.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

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
  const std::string ctx = Error(
      R"({"type":"gpt","vocab_size":64,"n_ctx":8,"n_positions":16,"n_layer":1,"n_head":2,"d_model":16})");
  EXPECT_NE(ctx.find("both $.n_ctx (8) and $.n_positions (16)"), std::string::npos) << ctx;
  // One spelling alone is fine either way.
  EXPECT_TRUE(
      ParseModelSpec(
          R"({"type":"gpt","vocab_size":64,"block_size":8,"n_layer":1,"n_head":2,"n_embd":16})")
          .ok());
}

// GPT2Config's name for the context, as people paste it from a config.json.
TEST(ModelSpec, AGptSpecTakesHuggingFacesNPositions) {
  Result<ModelSpec> spec = ParseModelSpec(
      R"({"type":"gpt","vocab_size":64,"n_positions":24,"n_layer":1,"n_head":2,"n_embd":16})");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->lm.n_ctx, 24);
}

// Found by fuzzing: a number beyond double's range made the JSON parser
// throw out_of_range, which escaped as std::terminate.
TEST(ModelSpecErrors, ANumberBeyondDoubleRangeIsMalformedJsonNotACrash) {
  const std::string e = Error(R"({"type":"gpt","vocab_size":64,"n_ctx":1e999,"n_layer":1})");
  EXPECT_NE(e.find("model spec: malformed JSON"), std::string::npos) << e;
  EXPECT_NE(e.find("number overflow"), std::string::npos) << e;
}

TEST(ModelSpecErrors, AModelWithoutLayersIsRefusedByName) {
  for (const char *text :
       {R"({"type":"gpt","vocab_size":64,"n_ctx":8,"n_layer":0,"n_head":2,"d_model":16})",
        R"({"model_type":"llama","vocab_size":64,"hidden_size":16,"intermediate_size":32,
            "num_hidden_layers":0,"num_attention_heads":2,"max_position_embeddings":8})",
        R"({"model_type":"bloom","vocab_size":64,"hidden_size":16,"n_layer":0,"n_head":2})"}) {
    const std::string e = Error(text);
    EXPECT_TRUE(e.find("n_layer") != std::string::npos ||
                e.find("num_hidden_layers") != std::string::npos)
        << e;
  }
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

// A Hugging Face config.json passes as it is: "model_type" names the family,
// bookkeeping fields are accepted, LlamaConfig's defaults apply.
TEST(ModelSpecFamilies, LlamaConfigJsonAsItIs) {
  const Result<ModelSpec> spec = ParseModelSpec(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
    "bos_token_id": 128000, "eos_token_id": 128001, "transformers_version": "4.43.0",
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192,
    "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": true, "use_cache": true, "vocab_size": 128256,
    "attention_bias": false, "attention_dropout": 0.0, "mlp_bias": false,
    "initializer_range": 0.02, "pretraining_tp": 1, "seq_length": 4096})");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const TransformerSpec &lm = spec.value().lm;
  EXPECT_EQ(spec.value().type, ModelSpec::Type::kLlama);
  EXPECT_EQ(lm.kv_heads(), 8);
  EXPECT_EQ(lm.head_size(), 64);
  EXPECT_EQ(lm.ffn_size(), 8192);
  EXPECT_EQ(lm.n_ctx, 4096);  // seq_length: the sequences trained on
  EXPECT_TRUE(lm.tie_embeddings);
  EXPECT_EQ(lm.rope.scaling, int32_t(math::RopeScaling::kLlama3));
  EXPECT_FLOAT_EQ(lm.rope.factor, 32.0f);
  // Without seq_length, the whole context.
  const Result<ModelSpec> plain = ParseModelSpec(
      R"({"type":"llama","vocab_size":32000,"hidden_size":64,"intermediate_size":172,
          "num_hidden_layers":2,"num_attention_heads":4})");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain.value().lm.n_ctx, 2048);
  EXPECT_FALSE(plain.value().lm.tie_embeddings);
  EXPECT_DOUBLE_EQ(plain.value().lm.norm_eps, 1e-6);
}

TEST(ModelSpecFamilies, FieldsThatChangeTheMathAndAreNotBuiltAreNamed) {
  const char *base = R"({"type":"llama","vocab_size":64,"hidden_size":16,"intermediate_size":32,
                         "num_hidden_layers":1,"num_attention_heads":4,)";
  auto error = [&](const std::string &extra) { return Error((base + extra + "}").c_str()); };
  EXPECT_NE(error(R"("rope_scaling":{"rope_type":"yarn","factor":4.0})")
                .find("rope_type \"yarn\" is not supported yet"),
            std::string::npos);
  EXPECT_NE(error(R"("hidden_act":"gelu")").find("$.hidden_act \"gelu\" is not supported yet"),
            std::string::npos);
  EXPECT_NE(error(R"("num_key_value_heads":3)").find("not a multiple of num_key_value_heads 3"),
            std::string::npos);
  EXPECT_NE(error(R"("max_position_embeddings":64,"sliding_window":32)")
                .find("sliding-window attention is not supported yet"),
            std::string::npos);
  EXPECT_NE(error(R"("attention_dropout":0.1)").find("attention_dropout 0.1"), std::string::npos);
  EXPECT_NE(error(R"("rope_scalling":null)").find("unknown key \"rope_scalling\""),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"bloom","hidden_size":16,"n_embed":16,"n_layer":1,"n_head":2})")
                .find("both $.hidden_size (16) and $.n_embed (16)"),
            std::string::npos);
  EXPECT_NE(Error(R"({"type":"bloom","hidden_size":16,"n_layer":1,"n_head":2,
                      "apply_residual_connection_post_layernorm":true})")
                .find("apply_residual_connection_post_layernorm true is not supported yet"),
            std::string::npos);
}

// GPT-2's released config.json (openai-community/gpt2), as it is.
constexpr const char *kGpt2Config = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
  "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
  "n_head": 12, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1,
  "summary_activation": null, "summary_first_dropout": 0.1, "summary_proj_to_labels": true,
  "summary_type": "cls_index", "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257})";

TEST(ModelSpecFamilies, Gpt2ConfigJsonAsItIs) {
  const Result<ModelSpec> spec = ParseModelSpec(kGpt2Config);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->type, ModelSpec::Type::kGpt);
  EXPECT_EQ(spec->lm.vocab, 50257);
  EXPECT_EQ(spec->lm.n_ctx, 1024);
  EXPECT_EQ(spec->lm.d_model, 768);
  EXPECT_EQ(spec->lm.n_layer, 12);
  EXPECT_EQ(spec->lm.n_head, 12);
  // The same model as dstrain's own spelling of it.
  const Result<ModelSpec> ours = ParseModelSpec(
      R"({"type":"gpt","vocab_size":50257,"n_ctx":1024,"n_layer":12,"n_head":12,"d_model":768})");
  ASSERT_TRUE(ours.ok());
  EXPECT_EQ(FirstComputationDifference(ours.value(), spec.value()), "");
}

TEST(ModelSpecFamilies, Gpt2FieldsThatChangeTheMathAreNamed) {
  auto error = [](const std::string &change) {
    nlohmann::json config = nlohmann::json::parse(kGpt2Config);
    const nlohmann::json patch = nlohmann::json::parse("{" + change + "}");
    for (auto it = patch.begin(); it != patch.end(); ++it) config[it.key()] = it.value();
    return Error(config.dump().c_str());
  };
  EXPECT_NE(error(R"("activation_function":"relu")").find("\"relu\" is not supported yet"),
            std::string::npos);
  EXPECT_NE(error(R"("n_inner":1024)").find("n_inner 1024 is not supported yet"),
            std::string::npos);
  EXPECT_NE(error(R"("layer_norm_epsilon":1e-6)").find("layer_norm_epsilon"), std::string::npos);
  EXPECT_NE(error(R"("scale_attn_by_inverse_layer_idx":true)")
                .find("scale_attn_by_inverse_layer_idx true is not supported yet"),
            std::string::npos);
  EXPECT_NE(error(R"("tie_word_embeddings":false)").find("tie_word_embeddings false"),
            std::string::npos);
  EXPECT_NE(error(R"("n_ctx":512)").find("differs from $.n_positions 1024"), std::string::npos);
  EXPECT_NE(error(R"("n_embd_typo":1)").find("unknown key \"n_embd_typo\""), std::string::npos);
}

TEST(ModelSpecFamilies, BloomConfigJsonAsItIs) {
  const Result<ModelSpec> spec = ParseModelSpec(R"({
    "apply_residual_connection_post_layernorm": false, "architectures": ["BloomForCausalLM"],
    "attention_dropout": 0.0, "attention_softmax_in_fp32": true, "bias_dropout_fusion": true,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_dropout": 0.0, "hidden_size": 1024,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "masked_softmax_fusion": true,
    "model_type": "bloom", "n_head": 16, "n_inner": null, "n_layer": 24, "offset_alibi": 100,
    "pad_token_id": 3, "pretraining_tp": 1, "skip_bias_add": true, "skip_bias_add_qkv": false,
    "slow_but_exact": false, "transformers_version": "4.21.0", "unk_token_id": 0,
    "use_cache": true, "vocab_size": 250880})");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec.value().type, ModelSpec::Type::kBloom);
  EXPECT_EQ(spec.value().lm.n_ctx, 2048);
  EXPECT_EQ(spec.value().lm.ffn_size(), 4096);
}

TEST(ModelSpecFamilies, ComputationDifferencesOfTheFamiliesAreNamed) {
  const char *a = R"({"type":"llama","vocab_size":64,"hidden_size":16,"intermediate_size":32,
                      "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2})";
  const char *b = R"({"type":"llama","vocab_size":64,"hidden_size":16,"intermediate_size":32,
                      "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":1})";
  EXPECT_EQ(FirstComputationDifference(ParseModelSpec(a).value(), ParseModelSpec(b).value()),
            "num_key_value_heads: 2 in the checkpoint, 1 here");
  const char *c = R"({"type":"llama","vocab_size":64,"hidden_size":16,"intermediate_size":32,
                      "num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,
                      "seq_length":128})";
  EXPECT_EQ(FirstComputationDifference(ParseModelSpec(a).value(), ParseModelSpec(c).value()), "");
}

}  // namespace
}  // namespace dst
