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

namespace {

bool EndsWith(const std::string &s, const std::string &tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

spec_json::Json HfConfigOf(const ModelSpec &spec, const std::string &torch_dtype) {
  const spec_json::Json own =
      spec_json::Json::parse(spec.canonical_json, nullptr, /*allow_exceptions=*/false);
  const spec_json::Json from = own.is_object() ? own : spec_json::Json::object();
  spec_json::Json config;
  switch (spec.type) {
    case ModelSpec::Type::kLlama:
      config = LlamaHfConfig(spec.lm, from);
      break;
    case ModelSpec::Type::kBloom:
      config = BloomHfConfig(spec.lm, from);
      break;
    default:
      config = Gpt2HfConfig(spec.lm, from);
      break;
  }
  for (const char *id : {"bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"})
    if (from.contains(id)) config[id] = from.at(id);
  config["torch_dtype"] = torch_dtype;
  config["tie_word_embeddings"] = spec.lm.tie_embeddings;
  return config;
}

HfTensorName HfTensorOf(const ModelSpec &spec, const std::string &name) {
  HfTensorName hf{name, false};
  if (spec.type == ModelSpec::Type::kGpt)
    for (const char *conv1d : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight",
                               ".mlp.c_proj.weight"})
      if (EndsWith(name, conv1d)) hf.transposed = true;
  return hf;
}

std::vector<std::string> HfAliases(const std::string &hf_name) {
  std::vector<std::string> names = {hf_name};
  for (const char *prefix : {"transformer.", "model."})
    if (hf_name.rfind(prefix, 0) == 0) names.push_back(hf_name.substr(std::string(prefix).size()));
  return names;
}

bool HfIgnorable(const ModelSpec &spec, const std::string &hf_name) {
  if (hf_name == "lm_head.weight" && !TiedWeightName(spec).empty()) return true;
  switch (spec.type) {
    case ModelSpec::Type::kGpt:
      return EndsWith(hf_name, ".attn.bias") || EndsWith(hf_name, ".attn.masked_bias");
    case ModelSpec::Type::kLlama:
      return EndsWith(hf_name, ".rotary_emb.inv_freq");
    default:
      return false;
  }
}

}  // namespace dst
