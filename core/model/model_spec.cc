#include "core/model/model_spec.h"

#include <filesystem>
#include <set>

#include "core/config/config_file.h"
#include "core/model/family.h"
#include "core/model/spec_json.h"

namespace dst {

using namespace spec_json;

namespace {

Status ParseSequentialLayer(const Json &layer, const std::string &path, SequentialLayerSpec *out) {
  if (!layer.is_object())
    return Expected(path, "an object like {\"type\": \"linear\", ...}", layer);
  if (!layer.contains("type") || !layer.at("type").is_string())
    return Expected(path + ".type", "one of \"linear\", \"relu\", \"gelu\", \"layernorm\"",
                    layer.contains("type") ? layer.at("type") : Json());
  const std::string type = layer.at("type").get<std::string>();
  if (type != "linear" && type != "relu" && type != "gelu" && type != "layernorm")
    return Expected(path + ".type", "one of \"linear\", \"relu\", \"gelu\", \"layernorm\"",
                    layer.at("type"));
  if (type == "linear") {
    DST_RETURN_IF_ERROR(CheckKeys(layer, path, {"type", "out_features", "bias"}));
    out->kind = SequentialLayerSpec::Kind::kLinear;
    DST_RETURN_IF_ERROR(ReadInt(layer, path, "out_features", 1, 1 << 24, &out->out_features, true));
    if (layer.contains("bias")) {
      if (!layer.at("bias").is_boolean())
        return Expected(path + ".bias", "true or false", layer.at("bias"));
      out->bias = layer.at("bias").get<bool>();
    }
    return Status::Ok();
  }
  DST_RETURN_IF_ERROR(CheckKeys(layer, path, {"type"}));
  if (type == "relu")
    out->kind = SequentialLayerSpec::Kind::kRelu;
  else if (type == "gelu")
    out->kind = SequentialLayerSpec::Kind::kGelu;
  else
    out->kind = SequentialLayerSpec::Kind::kLayerNorm;
  return Status::Ok();
}

Status ParseSequential(const Json &root, ModelSpec *spec) {
  DST_RETURN_IF_ERROR(
      CheckKeys(root, "the sequential spec", {"type", "input_dim", "layers", "loss", "seed"}));
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "input_dim", 1, 1 << 24, &spec->input_dim, true));
  if (!root.contains("layers") || !root.at("layers").is_array() || root.at("layers").empty())
    return Expected("$.layers", "a non-empty array of layers",
                    root.contains("layers") ? root.at("layers") : Json());
  const Json &layers = root.at("layers");
  for (size_t i = 0; i < layers.size(); ++i) {
    SequentialLayerSpec layer;
    DST_RETURN_IF_ERROR(
        ParseSequentialLayer(layers[i], "$.layers[" + std::to_string(i) + "]", &layer));
    spec->layers.push_back(layer);
  }
  const Json loss = root.contains("loss") ? root.at("loss") : Json("mse");
  if (loss == "mse")
    spec->loss = ModelSpec::Loss::kMse;
  else if (loss == "cross_entropy")
    spec->loss = ModelSpec::Loss::kCrossEntropy;
  else
    return Expected("$.loss", "\"mse\" or \"cross_entropy\"", loss);
  if (spec->SequentialOutputDim() < (spec->loss == ModelSpec::Loss::kCrossEntropy ? 2 : 1))
    return ConfigError("model spec: cross_entropy needs at least 2 outputs from the last layer");
  return ReadSeed(root, "$", &spec->seed);
}

}  // namespace

int64_t ModelSpec::SequentialOutputDim() const {
  int64_t width = input_dim;
  for (const auto &layer : layers)
    if (layer.kind == SequentialLayerSpec::Kind::kLinear) width = layer.out_features;
  return width;
}

const char *ModelTypeName(ModelSpec::Type type) {
  switch (type) {
    case ModelSpec::Type::kGpt:
      return "gpt";
    case ModelSpec::Type::kLlama:
      return "llama";
    case ModelSpec::Type::kBloom:
      return "bloom";
    case ModelSpec::Type::kSequential:
      break;
  }
  return "sequential";
}

namespace {

constexpr const char *kTypes =
    "\"gpt\", \"llama\", \"mistral\", \"bloom\", \"sequential\" or \"hf\"";

// The spec's type: "type", or a Hugging Face config.json's "model_type".
Result<ModelSpec::Type> TypeOf(const Json &root) {
  const bool typed = root.contains("type");
  const char *key = typed ? "type" : "model_type";
  if (!root.contains(key) || !root.at(key).is_string())
    return Expected("$.type", kTypes, root.contains(key) ? root.at(key) : Json());
  const std::string name = root.at(key).get<std::string>();
  if (name == "gpt" || (name == "gpt2" && !typed)) return ModelSpec::Type::kGpt;
  if (name == "llama" || name == "mistral") return ModelSpec::Type::kLlama;
  if (name == "bloom") return ModelSpec::Type::kBloom;
  if (name == "sequential" && typed) return ModelSpec::Type::kSequential;
  return Expected(std::string("$.") + key, kTypes, root.at(key));
}

}  // namespace

namespace {

// {"type": "hf", "path": DIR}: DIR/config.json parsed as the spec.
Result<ModelSpec> ParseHfSpec(const Json &root) {
  DST_RETURN_IF_ERROR(
      CheckKeys(root, "the hf spec", {"type", "path", "make_vocab_size_divisible_by"}));
  if (!root.contains("path") || !root.at("path").is_string() ||
      root.at("path").get<std::string>().empty())
    return Expected("$.path", "the Hugging Face model directory (holding config.json)",
                    root.contains("path") ? root.at("path") : Json());
  const std::string dir = root.at("path").get<std::string>();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return IoError("model spec: $.path \"" + dir + "\" is not a directory (a Hugging Face model "
                   "directory with config.json and model.safetensors)");
  Result<std::string> config = ReadConfigFile(dir + "/config.json", "Hugging Face config");
  DST_RETURN_IF_ERROR(config.status());
  Json parsed = Json::parse(config.value(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && (parsed.contains("type") || !parsed.contains("model_type")))
    return ConfigError("model spec: " + dir + "/config.json has no \"model_type\" (gpt2, llama, "
                       "mistral or bloom): not a Hugging Face config");
  Result<ModelSpec> spec = ParseModelSpec(config.value());
  if (!spec.ok()) {
    Status failed = spec.status();
    return failed.context(dir + "/config.json");
  }
  if (root.contains("make_vocab_size_divisible_by"))
    DST_RETURN_IF_ERROR(ReadVocabMultiple(root, &spec.value().lm.vocab_multiple));
  spec.value().hf_dir = dir;
  return spec;
}

}  // namespace

Result<std::string> ModelSpecText(const std::string &text, const std::string &path) {
  std::error_code ec;
  if (text.empty() && !path.empty() && std::filesystem::is_directory(path, ec))
    return Json{{"type", "hf"}, {"path", path}}.dump();
  return TextOrFile(text, path, "model");
}

Result<ModelSpec> ParseModelSpec(std::string_view json_text) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception &e) {  // parse_error, and out_of_range for a number like 1e999
    return ConfigError(std::string("model spec: malformed JSON: ") + e.what());
  }
  if (!root.is_object()) return Expected("$", "a JSON object", root);
  if (root.contains("type") && root.at("type") == "hf") return ParseHfSpec(root);
  Result<ModelSpec::Type> type = TypeOf(root);
  DST_RETURN_IF_ERROR(type.status());
  ModelSpec spec;
  spec.type = type.value();
  switch (spec.type) {
    case ModelSpec::Type::kGpt:
      DST_RETURN_IF_ERROR(ParseGptSpec(root, &spec));
      break;
    case ModelSpec::Type::kLlama:
      DST_RETURN_IF_ERROR(ParseLlamaSpec(root, &spec));
      break;
    case ModelSpec::Type::kBloom:
      DST_RETURN_IF_ERROR(ParseBloomSpec(root, &spec));
      break;
    case ModelSpec::Type::kSequential:
      DST_RETURN_IF_ERROR(ParseSequential(root, &spec));
      break;
  }
  spec.canonical_json = root.dump();
  return spec;
}

namespace {

std::string Differs(const std::string &field, const std::string &saved,
                    const std::string &current) {
  return field + ": " + saved + " in the checkpoint, " + current + " here";
}

const char *LayerKindName(SequentialLayerSpec::Kind kind) {
  switch (kind) {
    case SequentialLayerSpec::Kind::kLinear:
      return "linear";
    case SequentialLayerSpec::Kind::kRelu:
      return "relu";
    case SequentialLayerSpec::Kind::kGelu:
      return "gelu";
    case SequentialLayerSpec::Kind::kLayerNorm:
      return "layernorm";
  }
  return "?";
}

}  // namespace

std::string FirstComputationDifference(const ModelSpec &saved, const ModelSpec &current) {
  if (saved.type != current.type)
    return Differs("type", ModelTypeName(saved.type), ModelTypeName(current.type));
  if (saved.IsLanguageModel()) {
    const TransformerSpec &a = saved.lm, &b = current.lm;
    const struct {
      const char *name;
      int64_t a, b;
    } fields[] = {{"vocab_size", a.vocab, b.vocab},
                  // (the learned positions' table; other families train any length)
                  {"n_ctx", saved.type == ModelSpec::Type::kGpt ? a.n_ctx : 0,
                   saved.type == ModelSpec::Type::kGpt ? b.n_ctx : 0},
                  {"n_layer", a.n_layer, b.n_layer},
                  {"n_head", a.n_head, b.n_head},
                  {"d_model", a.d_model, b.d_model},
                  {"num_key_value_heads", a.kv_heads(), b.kv_heads()},
                  {"head_dim", a.head_size(), b.head_size()},
                  {"intermediate_size", a.ffn_size(), b.ffn_size()},
                  {"attention_bias", a.attention_bias, b.attention_bias},
                  {"mlp_bias", a.mlp_bias, b.mlp_bias},
                  {"tie_word_embeddings", a.tie_embeddings, b.tie_embeddings},
                  {"rope_scaling", a.rope.scaling, b.rope.scaling}};
    for (const auto &f : fields)
      if (f.a != f.b) return Differs(f.name, std::to_string(f.a), std::to_string(f.b));
    const struct {
      const char *name;
      double a, b;
    } reals[] = {{"norm epsilon", a.norm_eps, b.norm_eps},
                 {"rope_theta", a.rope.theta, b.rope.theta},
                 {"rope_scaling.factor", a.rope.factor, b.rope.factor},
                 {"rope_scaling.low_freq_factor", a.rope.low_freq_factor, b.rope.low_freq_factor},
                 {"rope_scaling.high_freq_factor", a.rope.high_freq_factor,
                  b.rope.high_freq_factor},
                 {"rope_scaling.original_max_position_embeddings", a.rope.original_max_position,
                  b.rope.original_max_position}};
    for (const auto &f : reals)
      if (f.a != f.b) return Differs(f.name, Json(f.a).dump(), Json(f.b).dump());
    return "";
  }
  auto loss = [](const ModelSpec &s) {
    return std::string(s.loss == ModelSpec::Loss::kMse ? "mse" : "cross_entropy");
  };
  if (saved.loss != current.loss) return Differs("loss", loss(saved), loss(current));
  if (saved.input_dim != current.input_dim)
    return Differs("input_dim", std::to_string(saved.input_dim), std::to_string(current.input_dim));
  if (saved.layers.size() != current.layers.size())
    return Differs("layers (count)", std::to_string(saved.layers.size()),
                   std::to_string(current.layers.size()));
  for (size_t i = 0; i < saved.layers.size(); ++i) {
    const SequentialLayerSpec &a = saved.layers[i], &b = current.layers[i];
    const std::string at = "layers[" + std::to_string(i) + "]";
    if (a.kind != b.kind)
      return Differs(at + ".type", LayerKindName(a.kind), LayerKindName(b.kind));
    if (a.kind != SequentialLayerSpec::Kind::kLinear) continue;
    if (a.out_features != b.out_features)
      return Differs(at + ".out_features", std::to_string(a.out_features),
                     std::to_string(b.out_features));
    if (a.bias != b.bias)
      return Differs(at + ".bias", a.bias ? "true" : "false", b.bias ? "true" : "false");
  }
  return "";
}

}  // namespace dst
