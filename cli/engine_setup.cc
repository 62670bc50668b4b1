#include "engine_setup.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "cli_error.h"
#include "default_job.h"

namespace dstrain_cli {
namespace {

std::string SourceName(const std::string &path) {
  return path.empty() ? "built-in default" : "'" + path + "'";
}

// The positive integer at `key` of `object`, if there is one.
std::optional<int64_t> PositiveInt(const nlohmann::json &object, const char *key) {
  const auto found = object.find(key);
  if (found == object.end() || !found->is_number_integer() || found->get<int64_t>() <= 0) {
    return std::nullopt;
  }
  return found->get<int64_t>();
}

// The config with dstrain.monitor.http turned on at `port`, or "" when the
// text is not a JSON object (the engine then reports the file's own error).
std::string WithMetricsServer(const std::string &text, int port) {
  nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return "";
  nlohmann::json &dstrain = config["dstrain"];
  if (!dstrain.is_object() && !dstrain.is_null()) return "";
  nlohmann::json &monitor = dstrain["monitor"];
  if (!monitor.is_object() && !monitor.is_null()) return "";
  nlohmann::json &http = monitor["http"];
  if (!http.is_object() && !http.is_null()) return "";
  http["enabled"] = true;
  http["port"] = port;
  return config.dump();
}

// The config file through the library's one reader; "" when it cannot be
// read (the engine then reads the path itself and reports why).
std::string ReadText(const std::string &path) {
  const char *text = nullptr;
  if (dst_config_file_read(path.c_str(), &text) != DST_OK || text == nullptr) return "";
  return text;
}

}  // namespace

Engine CreateEngine(const std::string &config_path, const std::string &model_path,
                    int64_t total_steps, std::optional<int> metrics_port) {
  dst_engine_options_t options;
  dst_engine_options_default(&options);
  const std::string default_config = DefaultConfigJson(total_steps);  // outlives the create
  std::string with_server;
  if (metrics_port)
    with_server = WithMetricsServer(config_path.empty() ? default_config : ReadText(config_path),
                                    *metrics_port);
  if (!with_server.empty()) {
    options.config_json = with_server.c_str();
  } else if (config_path.empty()) {
    options.config_json = default_config.c_str();
  } else {
    options.config_path = config_path.c_str();
  }
  if (model_path.empty()) {
    options.model_json = DefaultModelJson();
  } else {
    options.model_path = model_path.c_str();
  }
  options.total_steps = total_steps;
  dst_engine_t *engine = nullptr;
  Check(dst_engine_create(&engine, &options), "creating the engine (config " +
                                                  SourceName(config_path) + ", model " +
                                                  SourceName(model_path) + ")");
  return Engine(engine);
}

dst_engine_info_t ReadEngineInfo(const dst_engine_t *engine) {
  dst_engine_info_t info = {};
  info.struct_size = sizeof(info);
  Check(dst_engine_get_info(engine, &info), "reading the engine info");
  return info;
}

ResolvedConfig ReadResolvedConfig(const dst_engine_t *engine) {
  const char *json_text = nullptr;
  Check(dst_engine_config_json(engine, &json_text), "reading the resolved config");
  const nlohmann::json config = nlohmann::json::parse(json_text, nullptr, false);
  ResolvedConfig resolved;
  if (!config.is_object()) return resolved;
  resolved.steps_per_print =
      PositiveInt(config, "steps_per_print").value_or(resolved.steps_per_print);
  const auto runtime = config.find("dstrain");
  if (runtime != config.end() && runtime->is_object()) {
    const auto seed = runtime->find("seed");
    if (seed != runtime->end() && seed->is_number_unsigned()) {
      resolved.data_seed = seed->get<uint64_t>();
    }
  }
  return resolved;
}

BatchShape ChooseBatchShape(const dst_engine_info_t &info, int64_t requested_seq_len) {
  const int64_t seq_len = requested_seq_len > 0 ? requested_seq_len : info.seq_len;
  if (seq_len > info.seq_len) {
    UsageError("--seq-len " + std::to_string(seq_len) + " exceeds the model's n_ctx " +
               std::to_string(info.seq_len) + "; pass --seq-len " + std::to_string(info.seq_len) +
               " or less");
  }
  BatchShape shape;
  shape.n_samples = static_cast<size_t>(info.micro_batch_size * info.grad_accum_steps);
  shape.seq_len = static_cast<size_t>(seq_len);
  shape.rank = info.dp_rank;  // every pipeline stage of a replica reads the same samples
  shape.dp_size = info.dp_size;
  return shape;
}

}  // namespace dstrain_cli
