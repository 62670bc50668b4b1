#include "core/model/model_spec.h"

#include <nlohmann/json.hpp>
#include <set>

namespace dst {

namespace {

using Json = nlohmann::json;

std::string Shorten(const Json &value) {
  std::string text = value.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

Status Expected(const std::string &path, const std::string &what, const Json &found) {
  return ConfigError("model spec: " + path + ": expected " + what + ", found " + Shorten(found));
}

Status CheckKeys(const Json &object, const std::string &path, const std::set<std::string> &known) {
  for (const auto &[key, value] : object.items()) {
    if (known.count(key)) continue;
    std::string list;
    for (const auto &k : known) list += (list.empty() ? "" : ", ") + k;
    return ConfigError("model spec: unknown key \"" + key + "\" in " + path +
                       "; known keys: " + list);
  }
  return Status::Ok();
}

// Reads object[key] as an integer in [lo, hi]; missing keys take `fallback`
// when it is set, else are an error.
Status ReadInt(const Json &object, const std::string &path, const char *key, int64_t lo, int64_t hi,
               int64_t *out, bool required) {
  const std::string where = path + "." + key;
  if (!object.contains(key)) {
    if (required) return ConfigError("model spec: missing required key " + where);
    return Status::Ok();
  }
  const Json &v = object.at(key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)))
    return Expected(where, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                    v);
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi)
    return Expected(where, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                    v);
  *out = n;
  return Status::Ok();
}

Status ReadSeed(const Json &object, const std::string &path, uint64_t *seed) {
  if (!object.contains("seed")) return Status::Ok();
  const Json &v = object.at("seed");
  if (!v.is_number_integer() ||
      (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0))
    return Expected(path + ".seed", "a non-negative integer", v);
  *seed = v.get<uint64_t>();
  return Status::Ok();
}

Status ParseGpt(const Json &root, ModelSpec *spec) {
  DST_RETURN_IF_ERROR(
      CheckKeys(root, "the gpt spec",
                {"type", "vocab_size", "n_ctx", "block_size", "n_layer", "n_head", "d_model",
                 "n_embd", "seed", "dropout", "bias", "tie_word_embeddings"}));
  GptDims &d = spec->gpt;
  const int64_t kMax = int64_t(1) << 24;
  // Two spellings of one key: which one would win is a guess, so neither does.
  for (const auto &[a, b] :
       {std::pair<const char *, const char *>{"n_ctx", "block_size"}, {"d_model", "n_embd"}})
    if (root.contains(a) && root.contains(b))
      return ConfigError(std::string("model spec: both $.") + a + " (" + Shorten(root.at(a)) +
                         ") and $." + b + " (" + Shorten(root.at(b)) +
                         ") are given; they are two names of one setting: keep one");
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "vocab_size", 2, kMax, &d.vocab, false));
  const bool ctx_alias = root.contains("block_size");
  DST_RETURN_IF_ERROR(
      ReadInt(root, "$", ctx_alias ? "block_size" : "n_ctx", 1, 1 << 16, &d.n_ctx, true));
  DST_RETURN_IF_ERROR(ReadInt(root, "$", "n_layer", 0, 4096, &d.n_layer, true));
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
  spec->loss = ModelSpec::Loss::kCrossEntropy;
  return ReadSeed(root, "$", &spec->seed);
}

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

Result<ModelSpec> ParseModelSpec(std::string_view json_text) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::parse_error &e) {
    return ConfigError(std::string("model spec: malformed JSON: ") + e.what());
  }
  if (!root.is_object()) return Expected("$", "a JSON object", root);
  if (!root.contains("type") || !root.at("type").is_string())
    return Expected("$.type", "\"gpt\" or \"sequential\"",
                    root.contains("type") ? root.at("type") : Json());
  ModelSpec spec;
  const std::string type = root.at("type").get<std::string>();
  if (type == "gpt") {
    spec.type = ModelSpec::Type::kGpt;
    DST_RETURN_IF_ERROR(ParseGpt(root, &spec));
  } else if (type == "sequential") {
    spec.type = ModelSpec::Type::kSequential;
    DST_RETURN_IF_ERROR(ParseSequential(root, &spec));
  } else {
    return Expected("$.type", "\"gpt\" or \"sequential\"", root.at("type"));
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
  auto type = [](const ModelSpec &s) {
    return std::string(s.type == ModelSpec::Type::kGpt ? "gpt" : "sequential");
  };
  if (saved.type != current.type) return Differs("type", type(saved), type(current));
  if (saved.type == ModelSpec::Type::kGpt) {
    const struct {
      const char *name;
      int64_t a, b;
    } fields[] = {{"vocab_size", saved.gpt.vocab, current.gpt.vocab},
                  {"n_ctx", saved.gpt.n_ctx, current.gpt.n_ctx},
                  {"n_layer", saved.gpt.n_layer, current.gpt.n_layer},
                  {"n_head", saved.gpt.n_head, current.gpt.n_head},
                  {"d_model", saved.gpt.d_model, current.gpt.d_model}};
    for (const auto &f : fields)
      if (f.a != f.b) return Differs(f.name, std::to_string(f.a), std::to_string(f.b));
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
