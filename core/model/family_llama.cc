// LLaMA 1/2/3 and Mistral-style decoders on the layer library, as Hugging
// Face's LlamaForCausalLM computes them: RMSNorm (in fp32), separate q/k/v
// projections with grouped-query heads (num_key_value_heads; 1 is
// multi-query), rotary embeddings in rotate_half layout (rope_theta,
// rope_scaling "linear" and "llama3"), a SiLU-gated MLP, no biases unless
// attention_bias / mlp_bias, every weight initialised N(0, initializer_range),
// the LM head tied or not (tie_word_embeddings). Tensor names are the
// checkpoints' (model.layers.0.self_attn.q_proj.weight, model.norm.weight,
// lm_head.weight), [out, in] as nn.Linear stores them.
//
// The spec takes LlamaConfig's field names, so that a model's config.json
// can be passed as it is: fields that do not change the math are accepted,
// fields that do and are not built are named.
#include <cmath>
#include <string>

#include "core/model/family.h"

namespace dst {

using namespace spec_json;

namespace {

// Accepted as they are: they change nothing dstrain computes (pretraining_tp
// slices the linears of a reference implementation the same math's way).
const std::set<std::string> kLlamaBookkeeping = {
    "architectures",  "bos_token_id", "eos_token_id",          "pad_token_id",
    "torch_dtype",    "use_cache",    "transformers_version",  "_name_or_path",
    "model_type",     "pretraining_tp"};

const std::set<std::string> kLlamaKeys = {
    "make_vocab_size_divisible_by",
    "type",           "seed",          "vocab_size",          "hidden_size",
    "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim",       "max_position_embeddings", "seq_length", "rms_norm_eps",
    "rope_theta",     "rope_scaling",  "attention_bias",      "mlp_bias",
    "tie_word_embeddings", "initializer_range", "hidden_act", "attention_dropout",
    "sliding_window"};

Status ParseRopeScaling(const Json &root, TransformerSpec *lm) {
  if (!root.contains("rope_scaling") || root.at("rope_scaling").is_null()) return Status::Ok();
  const Json &r = root.at("rope_scaling");
  const std::string path = "$.rope_scaling";
  if (!r.is_object()) return Expected(path, "null or an object like {\"rope_type\": \"llama3\", ...}", r);
  DST_RETURN_IF_ERROR(CheckKeys(r, path,
                                {"rope_type", "type", "factor", "low_freq_factor",
                                 "high_freq_factor", "original_max_position_embeddings"}));
  Result<std::string> key = OneOf(r, {"rope_type", "type"});
  DST_RETURN_IF_ERROR(key.status());
  const std::string kind =
      key.value().empty() || !r.at(key.value()).is_string() ? "" : r.at(key.value()).get<std::string>();
  math::RopeParams &rope = lm->rope;
  if (kind == "default") return Status::Ok();
  if (kind == "linear")
    rope.scaling = int32_t(math::RopeScaling::kLinear);
  else if (kind == "llama3")
    rope.scaling = int32_t(math::RopeScaling::kLlama3);
  else if (kind == "dynamic" || kind == "yarn" || kind == "longrope" || kind == "su")
    return NotSupported("model spec: " + path + ".rope_type \"" + kind +
                        "\" is not supported yet; dstrain builds \"default\", \"linear\" and "
                        "\"llama3\" rotary scaling");
  else
    return Expected(path + ".rope_type", "\"default\", \"linear\" or \"llama3\"",
                    key.value().empty() ? Json() : r.at(key.value()));
  double factor = 1, low = 1, high = 4, original = 8192;
  if (!r.contains("factor")) return ConfigError("model spec: missing required key " + path + ".factor");
  DST_RETURN_IF_ERROR(ReadNumber(r, path, "factor", 0, 1e6, &factor));
  rope.factor = float(factor);
  if (rope.scaling != int32_t(math::RopeScaling::kLlama3)) return Status::Ok();
  DST_RETURN_IF_ERROR(ReadNumber(r, path, "low_freq_factor", 0, 1e6, &low));
  DST_RETURN_IF_ERROR(ReadNumber(r, path, "high_freq_factor", 0, 1e6, &high));
  DST_RETURN_IF_ERROR(ReadNumber(r, path, "original_max_position_embeddings", 0, 1e9, &original));
  if (!(high > low))
    return ConfigError("model spec: " + path + ": high_freq_factor " + Shorten(high) +
                       " must exceed low_freq_factor " + Shorten(low));
  rope.low_freq_factor = float(low);
  rope.high_freq_factor = float(high);
  rope.original_max_position = float(original);
  return Status::Ok();
}

DecoderNames LlamaBlockNames(int64_t layer) {
  const std::string l = "model.layers." + std::to_string(layer) + ".";
  DecoderNames n;
  n.kind = "llama_transformer_layer";
  n.norm1 = l + "input_layernorm";
  n.norm2 = l + "post_attention_layernorm";
  n.attention.q = l + "self_attn.q_proj";
  n.attention.k = l + "self_attn.k_proj";
  n.attention.v = l + "self_attn.v_proj";
  n.attention.out = l + "self_attn.o_proj";
  n.mlp.gate = l + "mlp.gate_proj";
  n.mlp.up = l + "mlp.up_proj";
  n.mlp.out = l + "mlp.down_proj";
  return n;
}

}  // namespace

Status ParseLlamaSpec(const Json &root, ModelSpec *spec) {
  std::set<std::string> known = kLlamaKeys;
  known.insert(kLlamaBookkeeping.begin(), kLlamaBookkeeping.end());
  DST_RETURN_IF_ERROR(CheckKeys(root, "the llama spec", known));
  TransformerSpec &lm = spec->lm;
  const int64_t kMax = int64_t(1) << 24;
  lm.norm_eps = 1e-6;  // LlamaConfig's defaults
  lm.tie_embeddings = false;
  lm.rope.theta = 10000.0f;
  int64_t max_positions = 2048;
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "vocab_size", 2, kMax, &lm.vocab, true));
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "hidden_size", 1, 1 << 17, &lm.d_model, true));
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "intermediate_size", 1, 1 << 20, &lm.ffn, true));
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "num_hidden_layers", 1, 4096, &lm.n_layer, true));
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "num_attention_heads", 1, 4096, &lm.n_head, true));
  lm.n_kv_head = lm.n_head;
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "num_key_value_heads", 1, 4096, &lm.n_kv_head, false));
  if (!root.contains("head_dim") || root.at("head_dim").is_null()) {
    if (lm.d_model % lm.n_head != 0)
      return ConfigError("model spec: hidden_size " + std::to_string(lm.d_model) +
                         " is not divisible by num_attention_heads " + std::to_string(lm.n_head) +
                         "; choose hidden_size = num_attention_heads * head_dim, or give head_dim");
    lm.head_dim = lm.d_model / lm.n_head;
  } else {
    DST_RETURN_IF_ERROR(ReadInt(root, "$", "head_dim", 2, 1 << 12, &lm.head_dim, false));
  }
  if (lm.head_dim % 2 != 0)
    return ConfigError("model spec: head_dim " + std::to_string(lm.head_dim) +
                       " is odd; rotary embeddings rotate pairs of a head's values");
  if (lm.n_head % lm.n_kv_head != 0)
    return ConfigError("model spec: num_attention_heads " + std::to_string(lm.n_head) +
                       " is not a multiple of num_key_value_heads " +
                       std::to_string(lm.n_kv_head) +
                       " (each key/value head serves a whole group of query heads)");
  DST_RETURN_IF_ERROR(
      ReadInt(root, "$", "max_position_embeddings", 1, 1 << 24, &max_positions, false));
  lm.n_ctx = max_positions;
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "seq_length", 1, max_positions, &lm.n_ctx, false));
  DST_RETURN_IF_ERROR(ReadNumber(root, "$", "rms_norm_eps", 0, 1, &lm.norm_eps));
  double theta = lm.rope.theta;
  DST_RETURN_IF_ERROR(ReadNumber(root, "$", "rope_theta", 0, 1e12, &theta));
  lm.rope.theta = float(theta);
  DST_RETURN_IF_ERROR(ParseRopeScaling(root, &lm));
  DST_RETURN_IF_ERROR(ReadBool(root, "$", "attention_bias", &lm.attention_bias));
  DST_RETURN_IF_ERROR(ReadBool(root, "$", "mlp_bias", &lm.mlp_bias));
  DST_RETURN_IF_ERROR(ReadBool(root, "$", "tie_word_embeddings", &lm.tie_embeddings));
  DST_RETURN_IF_ERROR(ReadNumber(root, "$", "initializer_range", 0, 10, &lm.init_std));
  DST_RETURN_IF_ERROR(RequireValue(root, "$", "hidden_act", "silu",
                                   "LLaMA's gated MLP is built with SiLU"));
  DST_RETURN_IF_ERROR(RequireValue(root, "$", "attention_dropout", 0.0, "dstrain has no dropout"));
  if (root.contains("sliding_window") && !root.at("sliding_window").is_null()) {
    int64_t window = 0;
    DST_RETURN_IF_ERROR(ReadInt(root, "$", "sliding_window", 1, 1 << 24, &window, false));
    if (window < lm.n_ctx)
      return NotSupported("model spec: $.sliding_window " + std::to_string(window) +
                          " is shorter than the sequences trained (" + std::to_string(lm.n_ctx) +
                          " tokens) and sliding-window attention is not supported yet; set "
                          "$.seq_length to at most " + std::to_string(window) +
                          " (causal attention over the whole sequence is then the same math)");
  }
  DST_RETURN_IF_ERROR(ReadVocabMultiple(root, &lm.vocab_multiple));
  spec->loss = ModelSpec::Loss::kCrossEntropy;
  return ReadSeed(root, "$", &spec->seed);
}

Json LlamaHfConfig(const TransformerSpec &lm, const Json &own) {
  const bool mistral = own.value("model_type", own.value("type", "")) == "mistral";
  Json rope_scaling = nullptr;
  const math::RopeParams &r = lm.rope;
  if (r.scaling == int32_t(math::RopeScaling::kLinear))
    rope_scaling = {{"rope_type", "linear"}, {"factor", r.factor}};
  else if (r.scaling == int32_t(math::RopeScaling::kLlama3))
    rope_scaling = {{"rope_type", "llama3"},
                    {"factor", r.factor},
                    {"low_freq_factor", r.low_freq_factor},
                    {"high_freq_factor", r.high_freq_factor},
                    {"original_max_position_embeddings", int64_t(r.original_max_position)}};
  Json config = {{"model_type", mistral ? "mistral" : "llama"},
                 {"architectures", {mistral ? "MistralForCausalLM" : "LlamaForCausalLM"}},
                 {"vocab_size", lm.vocab},
                 {"hidden_size", lm.d_model},
                 {"intermediate_size", lm.ffn_size()},
                 {"num_hidden_layers", lm.n_layer},
                 {"num_attention_heads", lm.n_head},
                 {"num_key_value_heads", lm.kv_heads()},
                 {"head_dim", lm.head_size()},
                 {"max_position_embeddings", own.value("max_position_embeddings", lm.n_ctx)},
                 {"rms_norm_eps", lm.norm_eps},
                 {"rope_theta", double(r.theta)},
                 {"rope_scaling", rope_scaling},
                 {"attention_bias", lm.attention_bias},
                 {"mlp_bias", lm.mlp_bias},
                 {"hidden_act", "silu"},
                 {"attention_dropout", 0.0},
                 {"initializer_range", lm.init_std},
                 {"use_cache", true}};
  if (mistral && own.contains("sliding_window")) config["sliding_window"] = own.at("sliding_window");
  // The longest sequence trained, where shorter than the positions (transformers ignores it).
  if (config.at("max_position_embeddings") != lm.n_ctx) config["seq_length"] = lm.n_ctx;
  return config;
}

DecoderFamily LlamaFamily(const TransformerSpec &lm) {
  const ParamInit init = ParamInit::Normal(lm.init_std);
  const int64_t C = lm.d_model;
  DecoderFamily f;
  f.embedding = {.vocab = lm.vocab, .d_model = C, .n_ctx = lm.n_ctx, .positions = false,
                 .norm = false, .norm_eps = lm.norm_eps, .init = init};
  f.embedding_names = {"model.embed_tokens.weight", "", "", "llama_embedding"};
  f.block.d_model = C;
  f.block.norm = NormKind::kRmsNorm;
  f.block.norm_eps = lm.norm_eps;
  AttentionConfig &a = f.block.attention;
  a.d_model = C;
  a.n_head = lm.n_head;
  a.n_kv_head = lm.kv_heads();
  a.head_dim = lm.head_size();
  a.qkv = QkvLayout::kSeparate;
  a.qkv_bias = a.out_bias = lm.attention_bias;
  a.rotary = true;
  a.rope = lm.rope;
  a.init = a.out_init = init;
  f.block.mlp = {C, lm.ffn_size(), MlpKind::kSwiGlu, lm.mlp_bias, init, init};
  f.head = {.vocab = lm.vocab, .d_model = C, .norm = NormKind::kRmsNorm, .norm_eps = lm.norm_eps,
            .init = init};
  f.tied = lm.tie_embeddings;
  f.head_names = {"model.norm", f.tied ? "model.embed_tokens" : "lm_head", "llama_head"};
  f.block_names = LlamaBlockNames;
  return f;
}

}  // namespace dst
