#include "core/model/family.h"

namespace dst {

DecoderFamily FamilyOf(const ModelSpec &spec) {
  switch (spec.type) {
    case ModelSpec::Type::kLlama:
      return LlamaFamily(spec.lm);
    case ModelSpec::Type::kBloom:
      return BloomFamily(spec.lm);
    default:
      return GptFamily(spec.lm);
  }
}

std::string TiedWeightName(const ModelSpec &spec) {
  if (!spec.IsLanguageModel()) return "";
  const DecoderFamily f = FamilyOf(spec);
  return f.tied ? f.embedding_names.wte : "";
}

std::string FamilyParamType(const ModelSpec &spec, const std::string &name) {
  auto has = [&](const char *part) { return name.find(part) != std::string::npos; };
  switch (spec.type) {
    case ModelSpec::Type::kGpt:
      if (has(".wte.") || has(".wpe.")) return "Embedding";
      if (has(".ln_")) return "LayerNorm";
      if (has(".attn.")) return "Attention";
      if (has(".mlp.")) return "Linear";
      return "";
    case ModelSpec::Type::kLlama:
      if (has("embed_tokens.")) return "Embedding";
      if (has("layernorm.") || name.rfind("model.norm.", 0) == 0) return "RMSNorm";
      if (has(".self_attn.")) return "Attention";
      if (has(".mlp.") || name.rfind("lm_head.", 0) == 0) return "Linear";
      return "";
    case ModelSpec::Type::kBloom:
      if (has("word_embeddings_layernorm.") || has("layernorm.") || has(".ln_f."))
        return "LayerNorm";
      if (has("word_embeddings.")) return "Embedding";
      if (has(".self_attention.")) return "Attention";
      if (has(".mlp.") || name.rfind("lm_head.", 0) == 0) return "Linear";
      return "";
    case ModelSpec::Type::kSequential:
      break;
  }
  return "";
}

}  // namespace dst
