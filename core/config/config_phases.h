// The phases of ParseConfig (config.cc), each in its own file: reading the
// JSON into typed sections (config_read.cc), the gates that refuse what this
// build cannot run (config_gates.cc), DeepSpeed's batch identity
// (config_batch.cc), and the resolved config as JSON (config_resolved.cc).
// Internal to core/config.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "core/config/config.h"
#include "core/config/json_reader.h"

namespace dst::config_phases {

using config_internal::AsDouble;
using config_internal::AsInt64;
using config_internal::AtLeast;
using config_internal::Between;
using config_internal::ElementPath;
using config_internal::GreaterThan;
using config_internal::IsAuto;
using config_internal::Json;
using config_internal::Mismatch;
using config_internal::ObjectReader;
using config_internal::ParseStrictJson;
using config_internal::Range;
using config_internal::Shorten;

// Key-table sections (see config_keys.cc).
inline constexpr std::string_view kTop = "";

// Recognised settings that have no field in Config yet. Reading fills them;
// the gates turn the ones this build cannot honour into kNotSupported.
struct ExtraSettings {
  std::string unsupported_optimizer;  // canonical name, e.g. "Lamb"
  std::string unsupported_scheduler;  // canonical name, e.g. "OneCycle"
  bool amsgrad = false;
  bool sparse_gradients = false;
  bool memory_breakdown = false;
  std::string enabled_monitor;  // first monitor section with "enabled": true
  bool amp_enabled = false;
  std::string grad_accum_dtype = "fp32";
  bool load_universal = false;
  std::string enabled_feature;  // first DeepSpeed-only feature section that is on
  std::string tp_size_key = "tensor_parallel.tp_size";    // where tp_size came from
  std::string pp_size_key = "pipeline_parallel.pp_size";  // where pp_size came from
};

// The batch keys as written; nullopt = absent, null or "auto".
struct BatchKeys {
  std::optional<int64_t> train_batch_size;
  std::optional<int64_t> micro_batch;
  std::optional<int64_t> accumulation;
  // The key the user wrote the accumulation as (errors name it).
  std::string accumulation_key = "gradient_accumulation_steps";
};

struct Parsed {
  Config config;
  ExtraSettings extra;
  BatchKeys batch;
};

// Phase 1: reads every section of `root` into *parsed (kConfig errors in
// reading order: syntax, unknown keys, types, ranges, conflicts).
Status ReadAll(const ObjectReader &root, const ConfigContext &context, Parsed *parsed);
// Phase 2: recognised features this build cannot run are kNotSupported.
Status CheckSupported(const Config &config, const ExtraSettings &extra);
// dstrain.device "cuda": the layouts a device trains yet.
Status CheckDeviceSupported(const Config &config);

// gradient_compression's momentum correction: SGD with momentum, and (ZeRO
// 2/3, whose reductions run per micro-batch) no gradient accumulation.
// After ResolveBatch.
Status CheckMomentumCorrection(const Config &config);
// gradient_compression.target "update": ZeRO 0, on the host.
Status CheckUpdateCompression(const Config &config);
// Phase 3: train_batch_size = micro x accumulation x dp, "auto" resolved.
Status ResolveBatch(const BatchKeys &written, const ConfigContext &context, Config *config);
// Phase 4: the resolved config in DeepSpeed's spelling (parsing it again
// gives the same Config).
std::string ResolvedJson(const Config &config);

}  // namespace dst::config_phases
