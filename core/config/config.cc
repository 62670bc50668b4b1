// ds_config.json -> Config. Four phases, so that a user first gets their file
// valid and only then learns what this build lacks:
//   1. read: JSON syntax, unknown keys, types, ranges and conflicts between
//      keys (kConfig, in reading order);
//   2. gates: recognised features that are not built yet (kNotSupported), one
//      small function per feature so that the issue building it flips one;
//   3. batch identity, DeepSpeed's rules (kConfig);
//   4. the resolved config as JSON, for reports.
#include "core/config/config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config/config_file.h"
#include "core/config/config_phases.h"

namespace dst {
namespace {

using config_phases::CheckSupported;
using config_phases::Json;
using config_phases::kTop;
using config_phases::Mismatch;
using config_phases::ObjectReader;
using config_phases::Parsed;
using config_phases::ParseStrictJson;
using config_phases::ReadAll;
using config_phases::ResolveBatch;
using config_phases::ResolvedJson;

// ---------------------------------------------------------------------------

Status CheckContext(const ConfigContext &context) {
  if (context.world_size < 1) {
    return InvalidArgument("ConfigContext.world_size must be >= 1, got " +
                           std::to_string(context.world_size));
  }
  if (context.total_steps < 0) {
    return InvalidArgument("ConfigContext.total_steps must be >= 0 (0 = unknown), got " +
                           std::to_string(context.total_steps));
  }
  return Status::Ok();
}

Result<Config> ParseChecked(std::string_view json_text, const ConfigContext &context) {
  DST_RETURN_IF_ERROR(CheckContext(context));
  Result<Json> json = ParseStrictJson(json_text);
  if (!json.ok()) return json.status();
  if (!json->is_object()) {
    return Mismatch("", "a JSON object at the root (a ds_config.json is {...})", json.value());
  }
  const ObjectReader root(json.value(), "", kTop);
  Parsed parsed;
  DST_RETURN_IF_ERROR(ReadAll(root, context, &parsed));
  DST_RETURN_IF_ERROR(CheckSupported(parsed.config, parsed.extra));
  DST_RETURN_IF_ERROR(ResolveBatch(parsed.batch, context, &parsed.config));
  DST_RETURN_IF_ERROR(config_phases::CheckDeviceSupported(parsed.config));
  DST_RETURN_IF_ERROR(config_phases::CheckMomentumCorrection(parsed.config));
  DST_RETURN_IF_ERROR(config_phases::CheckUpdateCompression(parsed.config));
  parsed.config.resolved_json = ResolvedJson(parsed.config);
  return std::move(parsed.config);
}

}  // namespace

Result<Config> ParseConfig(std::string_view json_text, const ConfigContext &context) {
  // Everything above reports through Status; this catch is the backstop that
  // keeps the no-throw promise should a library call still throw.
  try {
    return ParseChecked(json_text, context);
  } catch (const std::bad_alloc &) {
    return Status(Code::kOutOfMemory, "out of memory while parsing the config");
  } catch (const std::exception &e) {
    return InternalError(std::string("unexpected error while parsing the config: ") + e.what());
  }
}

OptimizerConfig SteppedOptimizer(const Config &config) {
  OptimizerConfig optimizer = config.optimizer;
  if (config.gradient_compression.enabled && config.gradient_compression.momentum_correction &&
      config.dp_size > 1) {
    optimizer.momentum = 0.0;
    optimizer.dampening = 0.0;
  }
  return optimizer;
}

Result<Config> LoadConfigFile(const std::string &path, const ConfigContext &context) {
  try {
    Result<std::string> text = ReadConfigFile(path, "config");
    if (!text.ok()) return text.status();
    Result<Config> config = ParseConfig(text.value(), context);
    if (config.ok()) return config;
    Status status = config.status();
    return std::move(status.context(path));
  } catch (const std::bad_alloc &) {
    return Status(Code::kOutOfMemory, "out of memory while reading config file " + path);
  } catch (const std::exception &e) {
    return InternalError("unexpected error while reading config file " + path + ": " + e.what());
  }
}

const char *DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return "fp16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat32:
      break;
  }
  return "fp32";
}

}  // namespace dst