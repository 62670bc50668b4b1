// dst_estimate_memory_json: per-rank model-state memory for each ZeRO stage.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capi/src/capi_util.h"
#include "capi/src/versioned_struct.h"
#include "core/config/config.h"
#include "core/config/config_file.h"
#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/zero/memory_estimate.h"
#include "core/zero/partition_plan.h"

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
      ReadSource(options->model_json, options->model_path, "model");
  if (!model_text.ok()) return dst::capi::FromStatus(model_text.status());
  dst::ConfigContext context;
  context.world_size = world_size;
  context.total_steps = options->total_steps > 0 ? options->total_steps : 1;
  dst::Result<dst::Config> config = dst::ParseConfig(config_text.value(), context);
  if (!config.ok()) return dst::capi::FromStatus(config.status());
  dst::Result<dst::ModelSpec> spec = dst::ParseModelSpec(model_text.value());
  if (!spec.ok()) return dst::capi::FromStatus(spec.status());

  const std::vector<dst::ParamDecl> decls = dst::DeclareParameters(spec.value());
  const int64_t psi = dst::CountParameters(spec.value());
  const int64_t dp = config.value().dp_size;
  // Stage 3 keeps tensors of at most this many elements whole on every rank.
  const int64_t persistent =
      dst::PersistentElements(decls, config.value().zero.stage3_param_persistence_threshold);
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  const dst::DType precision = config.value().precision();
  for (int stage = 0; stage <= 3; ++stage) {
    const int64_t stage_persistent = stage == 3 ? persistent : 0;
    const dst::ModelStateBytes b = dst::EstimateModelState(psi, dp, stage, config.value().optimizer,
                                                           stage_persistent, precision);
    stages.push_back({{"stage", stage},
                      {"parameters_bytes", b.parameters},
                      {"gradients_bytes", b.gradients},
                      {"optimizer_state_bytes", b.optimizer_state},
                      {"total_bytes", b.total()},
                      {"persistent_parameters", stage_persistent},
                      {"supported", true}});
  }
  nlohmann::ordered_json out = {
      {"num_parameters", psi},
      {"world_size", world_size},
      {"dp_size", dp},
      {"precision", dst::DTypeName(precision)},
      {"optimizer_state_bytes_per_parameter",
       dst::OptimizerStateBytesPerParameter(config.value().optimizer, precision)},
      {"configured_stage", config.value().zero.stage},
      {"stages", stages}};
  g_estimate_json = out.dump();
  *out_json = g_estimate_json.c_str();
  return DST_OK;
  DST_CAPI_END
}
