// BLOOM (BigScience 2022) on the layer library, as Hugging Face's
// BloomForCausalLM computes it: no position embeddings but ALiBi biases on
// the attention scores (slopes for any head count, as build_alibi_tensor
// makes them), a LayerNorm right after the word embeddings, biases
// throughout, the fused query_key_value projection in BLOOM's head-
// interleaved layout ([head][q, k, v] rows, so a tensor-parallel rank's
// heads are one contiguous block), the tanh GELU, the LM head tied to the
// word embeddings. Every weight is initialised N(0, initializer_range).
// Tensor names are the checkpoints' (transformer.h.0.self_attention.
// query_key_value.weight, transformer.word_embeddings_layernorm.weight, ...).
//
// The spec takes BloomConfig's field names (and their aliases n_embed,
// num_hidden_layers, num_attention_heads); BLOOM has no position limit, so
// the sequences trained on are `seq_length` tokens (default 2048).
#include <string>

#include "core/model/family.h"

namespace dst {

using namespace spec_json;

namespace {

// Accepted as they are: they change nothing dstrain computes (fusions and
// precision switches of Megatron-DeepSpeed's kernels, token ids, bookkeeping).
const std::set<std::string> kBloomBookkeeping = {
    "architectures",        "bos_token_id",       "eos_token_id",       "pad_token_id",
    "unk_token_id",         "torch_dtype",        "use_cache",          "transformers_version",
    "_name_or_path",        "model_type",         "pretraining_tp",     "slow_but_exact",
    "masked_softmax_fusion", "bias_dropout_fusion", "skip_bias_add",    "skip_bias_add_qkv",
    "attention_softmax_in_fp32", "offset_alibi", "dtype"};

const std::set<std::string> kBloomKeys = {
    "make_vocab_size_divisible_by",
    "type",          "seed",          "vocab_size",        "hidden_size",
    "n_embed",       "n_layer",       "num_hidden_layers", "n_head",
    "num_attention_heads", "layer_norm_epsilon", "initializer_range",
    "apply_residual_connection_post_layernorm", "hidden_dropout", "attention_dropout",
    "seq_length",    "n_ctx",         "tie_word_embeddings", "n_inner"};

// The value of one setting given under any of its names (required: an error
// when none is).
Status ReadAliased(const Json &root, const std::vector<std::string> &names, int64_t lo, int64_t hi,
                   int64_t *out, bool required) {
  Result<std::string> key = OneOf(root, names);
  DST_RETURN_IF_ERROR(key.status());
  if (key.value().empty()) {
    if (required) return ConfigError("model spec: missing required key $." + names.front());
    return Status::Ok();
  }
  return ReadInt(root, "$", key.value().c_str(), lo, hi, out, true);
}

DecoderNames BloomBlockNames(int64_t layer) {
  const std::string h = "transformer.h." + std::to_string(layer) + ".";
  DecoderNames n;
  n.kind = "bloom_transformer_block";
  n.norm1 = h + "input_layernorm";
  n.norm2 = h + "post_attention_layernorm";
  n.attention.qkv = h + "self_attention.query_key_value";
  n.attention.out = h + "self_attention.dense";
  n.mlp.fc = h + "mlp.dense_h_to_4h";
  n.mlp.out = h + "mlp.dense_4h_to_h";
  return n;
}

}  // namespace

Status ParseBloomSpec(const Json &root, ModelSpec *spec) {
  std::set<std::string> known = kBloomKeys;
  known.insert(kBloomBookkeeping.begin(), kBloomBookkeeping.end());
  DST_RETURN_IF_ERROR(CheckKeys(root, "the bloom spec", known));
  TransformerSpec &lm = spec->lm;
  const int64_t kMax = int64_t(1) << 24;
  lm.vocab = 250880;  // BloomConfig's defaults
  lm.n_ctx = 2048;
  lm.tie_embeddings = true;
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "vocab_size", 2, kMax, &lm.vocab, false));
  DST_RETURN_IF_ERROR(ReadAliased(root, {"hidden_size", "n_embed"}, 1, 1 << 17, &lm.d_model, true));
  DST_RETURN_IF_ERROR(ReadAliased(root, {"n_layer", "num_hidden_layers"}, 1, 4096, &lm.n_layer, true));
  DST_RETURN_IF_ERROR(ReadAliased(root, {"n_head", "num_attention_heads"}, 1, 4096, &lm.n_head, true));
  DST_RETURN_IF_ERROR(ReadAliased(root, {"seq_length", "n_ctx"}, 1, 1 << 20, &lm.n_ctx, false));
  if (lm.d_model % lm.n_head != 0)
    return ConfigError("model spec: hidden_size " + std::to_string(lm.d_model) +
                       " is not divisible by n_head " + std::to_string(lm.n_head) +
                       "; choose hidden_size = n_head * head_size");
  lm.n_kv_head = lm.n_head;
  lm.head_dim = lm.d_model / lm.n_head;
  lm.ffn = 4 * lm.d_model;
  if (root.contains("n_inner") && !root.at("n_inner").is_null()) {
    int64_t inner = 0;
    DST_RETURN_IF_ERROR(ReadInt(root, "$", "n_inner", 1, 1 << 20, &inner, false));
    if (inner != lm.ffn)
      return NotSupported("model spec: $.n_inner " + std::to_string(inner) +
                          " is not supported yet; BLOOM's MLP has 4 x hidden_size = " +
                          std::to_string(lm.ffn) + " features: set it to null");
  }
  DST_RETURN_IF_ERROR(ReadNumber(root, "$", "layer_norm_epsilon", 0, 1, &lm.norm_eps));
  if (lm.norm_eps != 1e-5)
    return NotSupported("model spec: $.layer_norm_epsilon " + Shorten(lm.norm_eps) +
                        " is not supported yet; dstrain's LayerNorm uses 1e-5 (BLOOM's value)");
  DST_RETURN_IF_ERROR(ReadNumber(root, "$", "initializer_range", 0, 10, &lm.init_std));
  DST_RETURN_IF_ERROR(ReadBool(root, "$", "tie_word_embeddings", &lm.tie_embeddings));
  DST_RETURN_IF_ERROR(RequireValue(root, "$", "apply_residual_connection_post_layernorm", false,
                                   "the residual is taken before the LayerNorm"));
  DST_RETURN_IF_ERROR(RequireValue(root, "$", "hidden_dropout", 0.0, "dstrain has no dropout"));
  DST_RETURN_IF_ERROR(RequireValue(root, "$", "attention_dropout", 0.0, "dstrain has no dropout"));
  DST_RETURN_IF_ERROR(ReadVocabMultiple(root, &lm.vocab_multiple));
  spec->loss = ModelSpec::Loss::kCrossEntropy;
  return ReadSeed(root, "$", &spec->seed);
}

Json BloomHfConfig(const TransformerSpec &lm, const Json &) {
  return {{"model_type", "bloom"},
          {"architectures", {"BloomForCausalLM"}},
          {"vocab_size", lm.vocab},
          {"hidden_size", lm.d_model},
          {"n_layer", lm.n_layer},
          {"n_head", lm.n_head},
          {"layer_norm_epsilon", lm.norm_eps},
          {"initializer_range", lm.init_std},
          {"apply_residual_connection_post_layernorm", false},
          {"hidden_dropout", 0.0},
          {"attention_dropout", 0.0},
          {"pretraining_tp", 1},
          {"slow_but_exact", false},
          {"seq_length", lm.n_ctx},  // the longest sequence trained (BLOOM's own configs say it)
          {"use_cache", true}};
}

DecoderFamily BloomFamily(const TransformerSpec &lm) {
  const ParamInit init = ParamInit::Normal(lm.init_std);
  const int64_t C = lm.d_model;
  DecoderFamily f;
  f.embedding = {.vocab = lm.vocab, .d_model = C, .n_ctx = lm.n_ctx, .positions = false,
                 .norm = true, .norm_eps = lm.norm_eps, .init = init};
  f.embedding_names = {"transformer.word_embeddings.weight", "",
                       "transformer.word_embeddings_layernorm", "bloom_embedding"};
  f.block.d_model = C;
  f.block.norm = NormKind::kLayerNorm;
  f.block.norm_eps = lm.norm_eps;
  AttentionConfig &a = f.block.attention;
  a.d_model = C;
  a.n_head = a.n_kv_head = lm.n_head;
  a.head_dim = C / lm.n_head;
  a.qkv = QkvLayout::kFusedInterleaved;
  a.qkv_bias = a.out_bias = true;
  a.alibi = true;
  a.init = a.out_init = init;
  f.block.mlp = {C, 4 * C, MlpKind::kGelu, /*bias=*/true, init, init};
  f.head = {.vocab = lm.vocab, .d_model = C, .norm = NormKind::kLayerNorm, .norm_eps = lm.norm_eps,
            .init = init};
  f.tied = lm.tie_embeddings;
  f.head_names = {"transformer.ln_f", f.tied ? "transformer.word_embeddings" : "lm_head",
                  "bloom_head"};
  f.block_names = BloomBlockNames;
  return f;
}

}  // namespace dst
