// The decoder families: how each one's spec becomes the layer library's
// layers (core/layers: embedding, decoder layers, LM head) with the
// family's own tensor names and layouts, those of its Hugging Face
// checkpoints. One file each: family_gpt.cc (GPT-2), family_llama.cc
// (LLaMA 1/2/3, Mistral), family_bloom.cc (BLOOM).
#pragma once

#include <string>
#include <vector>

#include "core/layers/decoder.h"
#include "core/layers/embedding.h"
#include "core/layers/lm_head.h"
#include "core/model/model_spec.h"
#include "core/model/spec_json.h"

namespace dst {

struct DecoderFamily {
  EmbeddingConfig embedding;
  EmbeddingNames embedding_names;
  DecoderConfig block;  // every decoder layer's
  LmHeadConfig head;
  LmHeadNames head_names;
  bool tied = true;  // the head reads the embedding's wte
  // Decoder layer i's tensor names.
  DecoderNames (*block_names)(int64_t layer) = nullptr;
};

// The family of a language-model spec (gpt, llama, bloom).
DecoderFamily FamilyOf(const ModelSpec &spec);

// The name of the token embedding's weight when the LM head is tied to it
// (a pipeline's last stage holds a copy of it); "" when untied or not a
// language model.
std::string TiedWeightName(const ModelSpec &spec);

// The layer type a tensor of the family belongs to, by its name, as a
// config names it (zero_allowed_param_types, fp16_override_modules):
// "Embedding", "LayerNorm", "RMSNorm", "Attention", "Linear"; "" for none.
std::string FamilyParamType(const ModelSpec &spec, const std::string &name);

// Where a tensor of dstrain's sits in its family's Hugging Face checkpoints
// (the *ForCausalLM model's state dict): the same name, and for GPT-2's
// Conv1D projections (c_attn, c_proj, c_fc) the transposed layout [in, out]
// where dstrain stores nn.Linear's [out, in].
struct HfTensorName {
  std::string name;
  bool transposed = false;
};
HfTensorName HfTensorOf(const ModelSpec &spec, const std::string &name);

// The other spellings of `hf_name` a checkpoint may use: saved from the base
// model (GPT2Model, LlamaModel, BloomModel) its names lack the prefix
// ("transformer.", "model.") and lm_head is absent.
std::vector<std::string> HfAliases(const std::string &hf_name);

// Tensors a family's checkpoints may carry that hold nothing dstrain trains:
// GPT-2's attention-mask buffers (attn.bias, attn.masked_bias), older
// LLaMA checkpoints' rotary inv_freq, the copy of a tied LM head. Skipped
// on import rather than refused as unexpected.
bool HfIgnorable(const ModelSpec &spec, const std::string &hf_name);

// The family's Hugging Face config.json for `spec` (model_type,
// architectures, the family's field names and values: what transformers'
// AutoConfig reads back as this model). Token ids, max_position_embeddings,
// a Mistral's model_type and sliding window are kept from the spec's own JSON
// where it had them. `torch_dtype`: "float32", "bfloat16" or "float16".
spec_json::Json HfConfigOf(const ModelSpec &spec, const std::string &torch_dtype);

// Each family's spec parser (ParseModelSpec dispatches on the type).
Status ParseGptSpec(const spec_json::Json &root, ModelSpec *spec);
Status ParseLlamaSpec(const spec_json::Json &root, ModelSpec *spec);
Status ParseBloomSpec(const spec_json::Json &root, ModelSpec *spec);

// Each family's HfConfigOf; `own`: the spec's JSON.
spec_json::Json Gpt2HfConfig(const TransformerSpec &lm, const spec_json::Json &own);
spec_json::Json LlamaHfConfig(const TransformerSpec &lm, const spec_json::Json &own);
spec_json::Json BloomHfConfig(const TransformerSpec &lm, const spec_json::Json &own);

DecoderFamily GptFamily(const TransformerSpec &lm);
DecoderFamily LlamaFamily(const TransformerSpec &lm);
DecoderFamily BloomFamily(const TransformerSpec &lm);

}  // namespace dst
