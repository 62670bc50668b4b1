// The model spec JSON: which model to build. Decoder-only language models of
// three families, and sequential models:
//   {"type": "gpt", "vocab_size": 256, "n_ctx": 256, "n_layer": 6, "n_head": 6,
//    "d_model": 384, "seed": 1337}
//   {"type": "llama", ...}   Hugging Face's LlamaConfig / MistralConfig field
//                            names (hidden_size, num_hidden_layers, ...): a
//                            model's own config.json, "model_type" naming it
//   {"type": "bloom", ...}   BloomConfig's names (hidden_size / n_embed, n_layer, n_head, ...)
//   {"type": "sequential", "input_dim": 16, "loss": "mse" | "cross_entropy",
//    "layers": [{"type": "linear", "out_features": 32, "bias": true}, {"type": "relu"},
//               {"type": "gelu"}, {"type": "layernorm"}, ...], "seed": 1}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/status.h"
#include "core/kernels/elementwise_math.h"

namespace dst {

// A decoder-only transformer language model (every family's dims).
struct TransformerSpec {
  int64_t vocab = 256;   // vocab_size: the tokenizer's
  int64_t n_ctx = 256;   // the longest sequence trained on (activations are sized for it)
  int64_t n_layer = 1;
  int64_t n_head = 1;
  int64_t d_model = 64;
  int64_t n_kv_head = 0;  // key/value heads (grouped-query attention); 0: n_head
  int64_t head_dim = 0;   // 0: d_model / n_head
  int64_t ffn = 0;        // the MLP's intermediate features; 0: 4 d_model
  double norm_eps = 1e-5;
  double init_std = 0.02;  // initializer_range
  bool attention_bias = false;  // LLaMA: q/k/v/o biases
  bool mlp_bias = false;        // LLaMA: gate/up/down biases
  bool tie_embeddings = true;   // the LM head reads the token embedding
  math::RopeParams rope;        // LLaMA's rotary embeddings
  // Megatron's make_vocab_size_divisible_by: the embedding and the LM head
  // hold vocab rounded up to a multiple of this x tp rows (padding rows that
  // no token reads and whose logits never enter the loss).
  int64_t vocab_multiple = 128;
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : d_model / n_head; }
  int64_t ffn_size() const { return ffn > 0 ? ffn : 4 * d_model; }
  // The rows the embedding and the LM head hold at tensor-parallel size tp.
  int64_t PaddedVocab(int64_t tp) const {
    const int64_t m = vocab_multiple * tp;
    return (vocab + m - 1) / m * m;
  }
};

struct SequentialLayerSpec {
  enum class Kind { kLinear, kRelu, kGelu, kLayerNorm };
  Kind kind = Kind::kLinear;
  int64_t out_features = 0;  // linear
  bool bias = true;          // linear
};

struct ModelSpec {
  enum class Type { kGpt, kLlama, kBloom, kSequential };
  enum class Loss { kCrossEntropy, kMse };
  Type type = Type::kGpt;
  Loss loss = Loss::kCrossEntropy;
  uint64_t seed = 1337;
  TransformerSpec lm;                       // gpt, llama, bloom
  int64_t input_dim = 0;                    // type sequential
  std::vector<SequentialLayerSpec> layers;  // type sequential
  std::string canonical_json;               // normalised spec, stored in checkpoints
  // {"type": "hf", "path": DIR}: the Hugging Face model directory whose
  // config.json this spec is and whose weights start the run ("" otherwise).
  std::string hf_dir;

  // A language model (tokens in, next-token cross-entropy): every type but sequential.
  bool IsLanguageModel() const { return type != Type::kSequential; }
  // Features per sample produced by the last sequential layer.
  int64_t SequentialOutputDim() const;
};

// "gpt", "llama", "bloom", "sequential".
const char *ModelTypeName(ModelSpec::Type type);

// Parses and validates; errors name the JSON path, expected and found.
// {"type": "hf", "path": DIR} reads DIR/config.json (a Hugging Face config:
// model_type gpt2, llama, mistral, bloom) and keeps DIR as hf_dir; its
// canonical_json is the config's, so a checkpoint records the model itself.
Result<ModelSpec> ParseModelSpec(std::string_view json_text);

// A model spec's text from a JSON string or a path (exactly one given): a
// path naming a directory is a Hugging Face model directory, i.e.
// {"type": "hf", "path": DIR}.
Result<std::string> ModelSpecText(const std::string &text, const std::string &path);

// The first field in which `saved` and `current` compute differently (the
// seed only sets the initial weights, so it is not compared), as
// "n_head: 4 in the checkpoint, 2 here"; "" when they compute the same.
// Fields such as n_head change the computation without changing any
// tensor's shape, so a checkpoint's tensors alone cannot show them.
std::string FirstComputationDifference(const ModelSpec &saved, const ModelSpec &current);

}  // namespace dst
