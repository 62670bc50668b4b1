// GPT-2 (Radford et al. 2019) on the layer library: learned positions,
// pre-LayerNorm blocks with a fused [q; k; v] projection (c_attn) and a GELU
// MLP (tanh approximation), residual projections initialised with
// std 0.02 / sqrt(2 n_layer), the LM head tied to the token embedding. Tensor
// names as Hugging Face's GPT2LMHeadModel (transformer.h.0.attn.c_attn, ...),
// stored [out, in] (nn.Linear's layout; GPT-2's own checkpoints keep Conv1D's
// transpose).
#include <cmath>
#include <string>

#include "core/common/log.h"
#include "core/model/family.h"

namespace dst {

using namespace spec_json;

namespace {

// Hugging Face's GPT2Config (a GPT-2 checkpoint's config.json, "model_type":
// "gpt2"): its field names, the fields that do not change dstrain's math
// accepted, those that do and are not built named. Dropout (every released
// GPT-2 config says 0.1) is accepted and not applied: dstrain has none; a
// warning says so.
Status ParseGpt2Config(const Json &root, ModelSpec *spec) {
  static const std::set<std::string> kKeys = {
      "model_type", "vocab_size", "n_positions", "n_ctx", "n_embd", "n_layer", "n_head",
      "n_inner", "activation_function", "resid_pdrop", "embd_pdrop", "attn_pdrop",
      "layer_norm_epsilon", "initializer_range", "scale_attn_weights",
      "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "tie_word_embeddings",
      "bos_token_id", "eos_token_id", "pad_token_id", "architectures", "torch_dtype",
      "transformers_version", "_name_or_path", "use_cache", "task_specific_params",
      "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
      "summary_first_dropout", "seed", "make_vocab_size_divisible_by"};
  DST_RETURN_IF_ERROR(CheckKeys(root, "the gpt2 config", kKeys));
  TransformerSpec &d = spec->lm;
  const int64_t kMax = int64_t(1) << 24;
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "vocab_size", 2, kMax, &d.vocab, true));
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "n_positions", 1, 1 << 16, &d.n_ctx, true));
  // Older configs repeat the context as n_ctx: the same value or a question.
  if (root.contains("n_ctx") && !(root.at("n_ctx").is_number_integer() &&
                                  root.at("n_ctx").get<int64_t>() == d.n_ctx))
    return ConfigError("model spec: $.n_ctx " + Shorten(root.at("n_ctx")) +
                       " differs from $.n_positions " + std::to_string(d.n_ctx) +
                       " (GPT2Config reads n_positions): make them equal or drop n_ctx");
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "n_layer", 1, 4096, &d.n_layer, true));
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "n_head", 1, 4096, &d.n_head, true));
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "n_embd", 1, 1 << 16, &d.d_model, true));
  if (d.d_model % d.n_head != 0)
    return ConfigError("model spec: n_embd " + std::to_string(d.d_model) +
                       " is not divisible by n_head " + std::to_string(d.n_head));
  DST_RETURN_IF_ERROR(RequireValue(root, "$", "n_inner", 4 * d.d_model,
                                   "dstrain's GPT MLP has 4 x n_embd features"));
  const std::string act = root.contains("activation_function") &&
                                  root.at("activation_function").is_string()
                              ? root.at("activation_function").get<std::string>()
                              : "gelu_new";
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")  // both GELU's tanh form
    return NotSupported("model spec: $.activation_function \"" + act +
                        "\" is not supported yet; dstrain's GPT computes GELU's tanh "
                        "approximation (\"gelu_new\")");
  DST_RETURN_IF_ERROR(RequireValue(root, "$", "layer_norm_epsilon", 1e-5,
                                   "dstrain's GPT LayerNorm uses GPT-2's epsilon"));
  DST_RETURN_IF_ERROR(RequireValue(root, "$", "scale_attn_weights", true,
                                   "dstrain scales attention scores by 1/sqrt(head size)"));
  DST_RETURN_IF_ERROR(RequireValue(root, "$", "scale_attn_by_inverse_layer_idx", false,
                                   "dstrain does not scale scores by the layer index"));
  DST_RETURN_IF_ERROR(RequireValue(root, "$", "tie_word_embeddings", true,
                                   "dstrain's GPT ties its LM head to the token embedding"));
  std::string dropped;
  for (const char *key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) {
    double p = 0;
    DST_RETURN_IF_ERROR(ReadNumber(root, "$", key, -1, 1, &p));
    if (p < 0) return Expected(std::string("$.") + key, "a probability in [0, 1]", root.at(key));
    if (p != 0) dropped += std::string(dropped.empty() ? "" : ", ") + key + " " + Shorten(p);
  }
  if (!dropped.empty())
    DST_LOG(kWarning, "model",
            "the GPT-2 config's dropout (" + dropped +
                ") is not applied: dstrain trains without dropout (set them to 0 to silence this)");
  DST_RETURN_IF_ERROR(ReadVocabMultiple(root, &d.vocab_multiple));
  spec->loss = ModelSpec::Loss::kCrossEntropy;
  return ReadSeed(root, "$", &spec->seed);
}

}  // namespace

Status ParseGptSpec(const Json &root, ModelSpec *spec) {
  if (!root.contains("type")) return ParseGpt2Config(root, spec);  // "model_type": "gpt2"
  DST_RETURN_IF_ERROR(CheckKeys(root, "the gpt spec",
                                {"type", "vocab_size", "n_ctx", "block_size", "n_positions",
                                 "n_layer", "n_head", "d_model", "n_embd", "seed", "dropout",
                                 "bias", "tie_word_embeddings", "make_vocab_size_divisible_by"}));
  TransformerSpec &d = spec->lm;
  const int64_t kMax = int64_t(1) << 24;
  // Two spellings of one key: which one would win is a guess, so neither does.
  // The context has three: nanoGPT's block_size and GPT2Config's n_positions.
  for (const auto &[a, b] : {std::pair<const char *, const char *>{"n_ctx", "block_size"},
                             {"n_ctx", "n_positions"},
                             {"block_size", "n_positions"},
                             {"d_model", "n_embd"}})
    if (root.contains(a) && root.contains(b))
      return ConfigError(std::string("model spec: both $.") + a + " (" + Shorten(root.at(a)) +
                         ") and $." + b + " (" + Shorten(root.at(b)) +
                         ") are given; they are two names of one setting: keep one");
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "vocab_size", 2, kMax, &d.vocab, false));
  const char *ctx_key = root.contains("block_size")    ? "block_size"
                        : root.contains("n_positions") ? "n_positions"
                                                       : "n_ctx";
  DST_RETURN_IF_ERROR(ReadInt(root, "$", ctx_key, 1, 1 << 16, &d.n_ctx, true));
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "n_layer", 1, 4096, &d.n_layer, true));
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "n_head", 1, 4096, &d.n_head, true));
  const bool dm_alias = root.contains("n_embd");
  DST_RETURN_IF_ERROR(
      ReadInt(root, "$", dm_alias ? "n_embd" : "d_model", 1, 1 << 16, &d.d_model, true));
  if (d.d_model % d.n_head != 0)
    return ConfigError("model spec: d_model " + std::to_string(d.d_model) +
                       " is not divisible by n_head " + std::to_string(d.n_head) +
                       "; choose d_model = n_head * head_size");
  if (root.contains("dropout")) {
    const Json &v = root.at("dropout");
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() >= 1)
      return Expected("$.dropout", "a number in [0, 1)", v);
    if (v.get<double>() != 0)
      return NotSupported("model spec: $.dropout " + Shorten(v) +
                          " is not supported yet; dstrain's GPT has no dropout: set it to 0");
  }
  for (const char *key : {"bias", "tie_word_embeddings"}) {
    if (!root.contains(key)) continue;
    const Json &v = root.at(key);
    if (!v.is_boolean()) return Expected(std::string("$.") + key, "true or false", v);
    if (!v.get<bool>())
      return NotSupported(std::string("model spec: $.") + key +
                          " false is not supported yet; dstrain's GPT uses biases and a tied "
                          "LM head (GPT-2)");
  }
  DST_RETURN_IF_ERROR(ReadVocabMultiple(root, &d.vocab_multiple));
  spec->loss = ModelSpec::Loss::kCrossEntropy;
  return ReadSeed(root, "$", &spec->seed);
}

namespace {

DecoderNames GptBlockNames(int64_t layer) {
  const std::string h = "transformer.h." + std::to_string(layer) + ".";
  DecoderNames n;
  n.kind = "gpt_transformer_block";
  n.norm1 = h + "ln_1";
  n.norm2 = h + "ln_2";
  n.attention.qkv = h + "attn.c_attn";
  n.attention.out = h + "attn.c_proj";
  n.mlp.fc = h + "mlp.c_fc";
  n.mlp.out = h + "mlp.c_proj";
  return n;
}

}  // namespace

Json Gpt2HfConfig(const TransformerSpec &lm, const Json &) {
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"vocab_size", lm.vocab},
          {"n_positions", lm.n_ctx},
          {"n_ctx", lm.n_ctx},
          {"n_embd", lm.d_model},
          {"n_layer", lm.n_layer},
          {"n_head", lm.n_head},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"layer_norm_epsilon", 1e-5},
          {"initializer_range", 0.02},
          {"scale_attn_weights", true},
          {"use_cache", true}};
}

DecoderFamily GptFamily(const TransformerSpec &lm) {
  constexpr double kInitStd = 0.02;  // GPT-2
  const ParamInit init = ParamInit::Normal(kInitStd);
  // Residual projections scaled by 1/sqrt(2 * n_layer).
  const ParamInit proj = ParamInit::Normal(kInitStd / std::sqrt(2.0 * double(lm.n_layer)));
  const int64_t C = lm.d_model;
  DecoderFamily f;
  f.embedding = {.vocab = lm.vocab, .d_model = C, .n_ctx = lm.n_ctx, .positions = true,
                 .norm = false, .norm_eps = 1e-5, .init = init};
  f.embedding_names = {"transformer.wte.weight", "transformer.wpe.weight", "", "gpt_embedding"};
  f.block.d_model = C;
  f.block.norm = NormKind::kLayerNorm;
  f.block.norm_eps = 1e-5;
  AttentionConfig &a = f.block.attention;
  a.d_model = C;
  a.n_head = a.n_kv_head = lm.n_head;
  a.head_dim = C / lm.n_head;
  a.qkv = QkvLayout::kFused;
  a.qkv_bias = a.out_bias = true;
  a.init = init;
  a.out_init = proj;
  f.block.mlp = {C, 4 * C, MlpKind::kGelu, /*bias=*/true, init, proj};
  f.head = {.vocab = lm.vocab, .d_model = C, .norm = NormKind::kLayerNorm, .norm_eps = 1e-5,
            .init = init};
  f.head_names = {"transformer.ln_f", "transformer.wte", "gpt_head"};
  f.tied = true;
  f.block_names = GptBlockNames;
  return f;
}

}  // namespace dst
