// dst_estimate_memory_json: per-rank model-state memory for each ZeRO stage.
#include <string>

#include "capi/src/capi_util.h"
#include "capi/src/versioned_struct.h"
#include "core/config/config_file.h"
#include "core/engine/memory_report.h"
#include "core/model/model_spec.h"

namespace {
thread_local std::string g_estimate_json;

dst::Result<std::string> ReadSource(const char *text, const char *path, const char *what) {
  if ((text == nullptr) == (path == nullptr))
    return dst::InvalidArgument(std::string("dst_estimate_memory_json: pass exactly one of the ") +
                                what + " JSON string and the " + what + " path");
  if (text) return std::string(text);
  return dst::ReadConfigFile(path, what);
}
}  // namespace

thread_local std::string g_config_file_text;

extern "C" dst_status_t dst_config_file_read(const char *path, const char **out_text) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(path);
  DST_CAPI_REQUIRE_NONNULL(out_text);
  dst::Result<std::string> text = dst::ReadConfigFile(path, "config");
  if (!text.ok()) return dst::capi::FromStatus(text.status());
  g_config_file_text = std::move(text).value();
  *out_text = g_config_file_text.c_str();
  return DST_OK;
  DST_CAPI_END
}

extern "C" dst_status_t dst_estimate_memory_json(const dst_engine_options_t *options,
                                                 int64_t world_size, const char **out_json) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(options);
  DST_CAPI_REQUIRE_NONNULL(out_json);
  dst_engine_options_t known;  // the caller's options as this library knows them
  if (dst_status_t st =
          dst::capi::ReadStruct(options, "dst_estimate_memory_json", "options", &known);
      st != DST_OK)
    return st;
  options = &known;
  if (world_size < 1)
    return dst::capi::Fail(DST_ERR_INVALID_ARGUMENT, "dst_estimate_memory_json: world_size is " +
                                                         std::to_string(world_size) +
                                                         "; it must be >= 1");
  dst::Result<std::string> config_text =
      ReadSource(options->config_json, options->config_path, "config");
  if (!config_text.ok()) return dst::capi::FromStatus(config_text.status());
  dst::Result<std::string> model_text =
      options->model_path != nullptr && options->model_json == nullptr
          ? dst::ModelSpecText("", options->model_path)  // a file, or a Hugging Face directory
          : ReadSource(options->model_json, options->model_path, "model");
  if (!model_text.ok()) return dst::capi::FromStatus(model_text.status());
  dst::Result<std::string> report = dst::MemoryReportJson(
      config_text.value(), model_text.value(), world_size, options->total_steps);
  if (!report.ok()) return dst::capi::FromStatus(report.status());
  g_estimate_json = std::move(report).value();
  *out_json = g_estimate_json.c_str();
  return DST_OK;
  DST_CAPI_END
}
