// ds_config phase 1: reading the JSON into typed sections (see config_phases.h).
#include "core/config/config_phases.h"

#include "core/common/log.h"

#include <strings.h>
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

#include "core/config/config_keys.h"

namespace dst::config_phases {

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// Key-table sections (see config_keys.cc).
constexpr std::string_view kZero = "zero_optimization";
constexpr std::string_view kOffloadOpt = "zero_optimization.offload_optimizer";
constexpr std::string_view kOffloadParam = "zero_optimization.offload_param";
constexpr std::string_view kFp16 = "fp16";
constexpr std::string_view kBf16 = "bf16";
constexpr std::string_view kBfloat16 = "bfloat16";
constexpr std::string_view kOptimizer = "optimizer";
constexpr std::string_view kScheduler = "scheduler";
constexpr std::string_view kActCkpt = "activation_checkpointing";
constexpr std::string_view kTensorParallel = "tensor_parallel";
constexpr std::string_view kPipelineParallel = "pipeline_parallel";
constexpr std::string_view kPipeline = "pipeline";
constexpr std::string_view kDataTypes = "data_types";
constexpr std::string_view kCheckpoint = "checkpoint";
constexpr std::string_view kAmp = "amp";
constexpr std::string_view kAio = "aio";
constexpr std::string_view kGradCompression = "gradient_compression";
constexpr std::string_view kCommunication = "communication";
constexpr std::string_view kDstrain = "dstrain";

// Defaults that "auto" stands for where config.h has no better source.
constexpr double kAutoGradientClipping = 1.0;  // Hugging Face's max_grad_norm default
const OptimizerConfig kDefaultOptimizer{};
const ZeroConfig kDefaultZero{};

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

// The entry of `names` equal to `typed` ignoring case, or "".
std::string_view MatchName(std::string_view typed, const std::vector<std::string_view> &names) {
  for (std::string_view name : names) {
    if (EqualsIgnoreCase(typed, name)) return name;
  }
  return {};
}

std::string JoinNames(const std::vector<std::string_view> &names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += i == 0 ? "" : (i + 1 == names.size() ? " and " : ", ");
    out += names[i];
  }
  return out;
}

// Reads the object parent[key] with `read` after checking its keys; an absent
// section reads as an empty one, so `read` leaves the defaults.
template <typename ReadFn>
Status ReadSection(const ObjectReader &parent, std::string_view key, std::string_view section,
                   ReadFn &&read) {
  Result<ObjectReader> child = parent.Child(key, section);
  if (!child.ok()) return child.status();
  DST_RETURN_IF_ERROR(child->CheckKeys());
  return read(child.value());
}

// ---------------------------------------------------------------------------
// Phase 1: reading

// A batch key: a positive integer, or absent/null/"auto" meaning "derive it".
Status ReadBatchKey(const ObjectReader &root, std::string_view key, std::optional<int64_t> *out) {
  const Json *value = root.Find(key);
  if (value == nullptr || value->is_null() || IsAuto(*value)) return Status::Ok();
  const std::optional<int64_t> n = AsInt64(*value);
  if (!n || *n < 1) return root.MismatchAt(key, *value);
  *out = n;
  return Status::Ok();
}

Status ReadBatchKeys(const ObjectReader &root, BatchKeys *batch) {
  DST_RETURN_IF_ERROR(ReadBatchKey(root, "train_batch_size", &batch->train_batch_size));
  DST_RETURN_IF_ERROR(ReadBatchKey(root, "train_micro_batch_size_per_gpu", &batch->micro_batch));
  return ReadBatchKey(root, "gradient_accumulation_steps", &batch->accumulation);
}

Status ReadBetas(const ObjectReader &params, std::array<double, 2> *betas) {
  const Json *value = params.Find("betas");
  if (value == nullptr) return Status::Ok();
  if (IsAuto(*value)) {
    *betas = kDefaultOptimizer.betas;
    return Status::Ok();
  }
  if (!value->is_array() || value->size() != 2) return params.MismatchAt("betas", *value);
  for (size_t i = 0; i < 2; ++i) {
    const std::optional<double> beta = AsDouble((*value)[i]);
    if (!beta || !Range{0.0, 1.0, false, /*max_open=*/true}.Contains(*beta)) {
      return Mismatch(ElementPath(params.PathOf("betas"), i), "a number in [0, 1)", (*value)[i]);
    }
    (*betas)[i] = *beta;
  }
  return Status::Ok();
}

// lr, betas, eps and weight_decay: the keys every Adam-family optimizer and
// Lamb share.
Status ReadMomentParams(const ObjectReader &params, OptimizerConfig *optimizer) {
  DST_RETURN_IF_ERROR(params.ReadNumber("lr", &optimizer->lr, AtLeast(0), kDefaultOptimizer.lr));
  DST_RETURN_IF_ERROR(ReadBetas(params, &optimizer->betas));
  DST_RETURN_IF_ERROR(
      params.ReadNumber("eps", &optimizer->eps, GreaterThan(0), kDefaultOptimizer.eps));
  DST_RETURN_IF_ERROR(params.ReadNumber("weight_decay", &optimizer->weight_decay, AtLeast(0),
                                        kDefaultOptimizer.weight_decay));
  return Status::Ok();
}

// max_grad_norm of DeepSpeed's fused optimizers: clipping the engine's
// gradient_clipping already does, before the optimizer.
Status RefuseOptimizerClipping(const ObjectReader &params) {
  double max_grad_norm = 0;
  DST_RETURN_IF_ERROR(params.ReadNumber("max_grad_norm", &max_grad_norm, AtLeast(0)));
  if (max_grad_norm <= 0) return Status::Ok();
  return NotSupported(params.PathOf("max_grad_norm") + " " + Shorten(Json(max_grad_norm)) +
                      ": clipping inside the optimizer is not supported; set the top-level "
                      "\"gradient_clipping\": " +
                      Shorten(Json(max_grad_norm)) +
                      " (the same global-norm clip, before the optimizer) and remove it here");
}

// Lamb's trust-ratio clamp [min_coeff, max_coeff].
Status ReadTrustClamp(const ObjectReader &params, OptimizerConfig *optimizer) {
  DST_RETURN_IF_ERROR(params.ReadNumber("max_coeff", &optimizer->max_coeff, GreaterThan(0),
                                        kDefaultOptimizer.max_coeff));
  DST_RETURN_IF_ERROR(params.ReadNumber("min_coeff", &optimizer->min_coeff, AtLeast(0),
                                        kDefaultOptimizer.min_coeff));
  if (optimizer->min_coeff <= optimizer->max_coeff) return Status::Ok();
  return ConfigError(params.PathOf("min_coeff") + " is " + Shorten(Json(optimizer->min_coeff)) +
                     ", above max_coeff " + Shorten(Json(optimizer->max_coeff)) +
                     ": the trust ratio is clamped to [min_coeff, max_coeff]");
}

Status ReadAdamParams(const ObjectReader &params, bool is_adamw, OptimizerConfig *optimizer,
                      ExtraSettings *extra) {
  DST_RETURN_IF_ERROR(ReadMomentParams(params, optimizer));
  DST_RETURN_IF_ERROR(params.ReadBool("adam_w_mode", &optimizer->adam_w_mode));
  if (is_adamw && !optimizer->adam_w_mode) {
    return ConfigError(params.PathOf("adam_w_mode") +
                       ": AdamW always decouples weight decay, found false; for L2-style decay "
                       "use \"type\": \"Adam\" with \"adam_w_mode\": false");
  }
  bool torch_adam = false;  // which implementation DeepSpeed picks; ours is one
  DST_RETURN_IF_ERROR(params.ReadBool("torch_adam", &torch_adam));
  DST_RETURN_IF_ERROR(params.ReadBool("bias_correction", &optimizer->bias_correction));
  return params.ReadBool("amsgrad", &extra->amsgrad);
}

// DeepSpeed's FusedLamb parameters. Its max_grad_norm clips inside the
// optimizer where the engine's gradient_clipping already does.
Status ReadLambParams(const ObjectReader &params, OptimizerConfig *optimizer,
                      ExtraSettings *extra) {
  DST_RETURN_IF_ERROR(ReadMomentParams(params, optimizer));
  DST_RETURN_IF_ERROR(params.ReadBool("bias_correction", &optimizer->bias_correction));
  DST_RETURN_IF_ERROR(params.ReadBool("eps_inside_sqrt", &optimizer->eps_inside_sqrt));
  DST_RETURN_IF_ERROR(ReadTrustClamp(params, optimizer));
  DST_RETURN_IF_ERROR(RefuseOptimizerClipping(params));
  return params.ReadBool("amsgrad", &extra->amsgrad);
}

// DeepSpeed's OnebitAdam / ZeroOneAdam parameters (optimizer->type says
// which). Their update has no bias correction and eps outside the root
// whatever bias_correction and eps_inside_sqrt say (DeepSpeed reads and
// ignores both); the transport keys name DeepSpeed's backends, and dstrain's
// dp group carries the exchange whatever they say.
Status ReadOneBitAdamParams(const ObjectReader &params, OptimizerConfig *optimizer,
                            ExtraSettings *extra) {
  DST_RETURN_IF_ERROR(ReadMomentParams(params, optimizer));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (optimizer->type == OptimizerType::kZeroOneAdam) {
    DST_RETURN_IF_ERROR(params.ReadInt("var_freeze_step", &optimizer->var_freeze_step, 0, kMax));
    DST_RETURN_IF_ERROR(
        params.ReadInt("var_update_scaler", &optimizer->var_update_scaler, 1, kMax));
    DST_RETURN_IF_ERROR(
        params.ReadInt("local_step_scaler", &optimizer->local_step_scaler, 1, kMax));
    DST_RETURN_IF_ERROR(
        params.ReadInt("local_step_clipper", &optimizer->local_step_clipper, 1, kMax));
  } else {
    DST_RETURN_IF_ERROR(params.ReadInt("freeze_step", &optimizer->freeze_step, 0, kMax));
  }
  if (optimizer->type == OptimizerType::kOneBitLamb) {
    DST_RETURN_IF_ERROR(ReadTrustClamp(params, optimizer));
    DST_RETURN_IF_ERROR(params.ReadNumber("coeff_beta", &optimizer->coeff_beta,
                                          Range{0.0, 1.0, false, /*max_open=*/true}));
    DST_RETURN_IF_ERROR(params.ReadNumber("factor_max", &optimizer->factor_max, GreaterThan(0)));
    DST_RETURN_IF_ERROR(params.ReadNumber("factor_min", &optimizer->factor_min, GreaterThan(0)));
    DST_RETURN_IF_ERROR(
        params.ReadNumber("factor_threshold", &optimizer->factor_threshold, AtLeast(0)));
    if (optimizer->factor_min > optimizer->factor_max)
      return ConfigError(params.PathOf("factor_min") +
                         " is above factor_max: the factor is "
                         "clamped to [factor_min, factor_max]");
  }
  bool ignored = false;
  DST_RETURN_IF_ERROR(params.ReadBool("bias_correction", &ignored));
  DST_RETURN_IF_ERROR(params.ReadBool("eps_inside_sqrt", &ignored));
  DST_RETURN_IF_ERROR(params.ReadBool("cuda_aware", &ignored));
  std::string backend;
  DST_RETURN_IF_ERROR(params.ReadString("comm_backend_name", &backend));
  optimizer->bias_correction = false;
  DST_RETURN_IF_ERROR(RefuseOptimizerClipping(params));
  return params.ReadBool("amsgrad", &extra->amsgrad);
}

Status ReadSgdParams(const ObjectReader &params, OptimizerConfig *optimizer) {
  // torch.optim.SGD has no default learning rate: a config without one is a mistake.
  if (!params.Has("lr"))
    return ConfigError(params.PathOf("lr") +
                       " is missing: SGD has no default learning rate (torch.optim.SGD requires "
                       "one); set optimizer.params.lr");
  DST_RETURN_IF_ERROR(params.ReadNumber("lr", &optimizer->lr, AtLeast(0), kDefaultOptimizer.lr));
  DST_RETURN_IF_ERROR(params.ReadNumber("momentum", &optimizer->momentum, AtLeast(0)));
  DST_RETURN_IF_ERROR(params.ReadNumber("dampening", &optimizer->dampening, AtLeast(0)));
  DST_RETURN_IF_ERROR(params.ReadNumber("weight_decay", &optimizer->weight_decay, AtLeast(0),
                                        kDefaultOptimizer.weight_decay));
  DST_RETURN_IF_ERROR(params.ReadBool("nesterov", &optimizer->nesterov));
  // torch.optim.SGD's rule: Nesterov needs a momentum and zero dampening.
  if (optimizer->nesterov && (optimizer->momentum <= 0 || optimizer->dampening != 0)) {
    return ConfigError(params.PathOf("nesterov") +
                       ": Nesterov momentum needs momentum > 0 and dampening 0 (as "
                       "torch.optim.SGD), found momentum " +
                       Shorten(Json(optimizer->momentum)) + " and dampening " +
                       Shorten(Json(optimizer->dampening)));
  }
  return Status::Ok();
}

// The optimizer's "type": reading needs its canonical name to pick the
// parameter section, and unknown names get a suggestion.
struct NamedType {
  std::string_view name;  // canonical spelling; "" when only recognised
  std::string_view unsupported_name;
};

Result<NamedType> ReadTypeName(const ObjectReader &section,
                               const std::vector<std::string_view> &supported,
                               const std::vector<std::string_view> &unsupported) {
  const Json *type = section.Find("type");
  if (type == nullptr) {
    return ConfigError(section.PathOf("type") + " is missing; expected " +
                       std::string(JoinNames(supported)) + " (any case)");
  }
  if (!type->is_string()) return section.MismatchAt("type", *type);
  const auto &typed = type->get_ref<const std::string &>();
  if (std::string_view name = MatchName(typed, supported); !name.empty()) {
    return NamedType{name, {}};
  }
  if (std::string_view name = MatchName(typed, unsupported); !name.empty()) {
    return NamedType{{}, name};
  }
  std::vector<std::string_view> all = supported;
  all.insert(all.end(), unsupported.begin(), unsupported.end());
  Status error = section.MismatchAt("type", *type);
  const std::string_view nearest = config_internal::NearestName(typed, all);
  if (nearest.empty()) return error;
  return ConfigError(error.message() + "; did you mean \"" + std::string(nearest) + "\"?");
}

Status ReadOptimizer(const ObjectReader &root, Parsed *parsed) {
  if (!root.Has("optimizer")) return Status::Ok();  // AdamW with config.h's defaults
  return ReadSection(root, "optimizer", kOptimizer, [&](const ObjectReader &section) -> Status {
    // DeepSpeed's own optimizers and the torch.optim ones it falls back to.
    static const std::vector<std::string_view> kSupported = {
        "Adam", "AdamW", "SGD", "Lamb", "OneBitAdam", "ZeroOneAdam", "OneBitLamb"};
    static const std::vector<std::string_view> kRecognised = {
        "Adagrad", "Lion",  "MuAdam", "MuAdamW", "MuSGD", "Muon",  "RMSprop",   "Adadelta",
        "Adamax",  "NAdam", "RAdam",  "ASGD",    "LBFGS", "Rprop", "SparseAdam"};
    Result<NamedType> type = ReadTypeName(section, kSupported, kRecognised);
    if (!type.ok()) return type.status();
    if (!type->unsupported_name.empty()) {
      // Its parameters follow another schema; the gate reports it.
      parsed->extra.unsupported_optimizer = std::string(type->unsupported_name);
      return Status::Ok();
    }
    OptimizerConfig &optimizer = parsed->config.optimizer;
    if (type->name == "SGD") {
      optimizer.type = OptimizerType::kSGD;
      return ReadSection(
          section, "params", "optimizer.params:SGD",
          [&](const ObjectReader &params) { return ReadSgdParams(params, &optimizer); });
    }
    if (type->name == "OneBitAdam" || type->name == "ZeroOneAdam" || type->name == "OneBitLamb") {
      const std::string name(type->name);
      optimizer.type = name == "ZeroOneAdam"  ? OptimizerType::kZeroOneAdam
                       : name == "OneBitLamb" ? OptimizerType::kOneBitLamb
                                              : OptimizerType::kOneBitAdam;
      return ReadSection(section, "params", "optimizer.params:" + name,
                         [&](const ObjectReader &params) {
                           return ReadOneBitAdamParams(params, &optimizer, &parsed->extra);
                         });
    }
    if (type->name == "Lamb") {
      optimizer.type = OptimizerType::kLamb;
      return ReadSection(section, "params", "optimizer.params:Lamb",
                         [&](const ObjectReader &params) {
                           return ReadLambParams(params, &optimizer, &parsed->extra);
                         });
    }
    const bool is_adamw = type->name == "AdamW";
    optimizer.type = is_adamw ? OptimizerType::kAdamW : OptimizerType::kAdam;
    return ReadSection(section, "params",
                       is_adamw ? "optimizer.params:AdamW" : "optimizer.params:Adam",
                       [&](const ObjectReader &params) {
                         return ReadAdamParams(params, is_adamw, &optimizer, &parsed->extra);
                       });
  });
}

Status ReadWarmupType(const ObjectReader &params, WarmupType *type) {
  std::string name = *type == WarmupType::kLog ? "log" : "linear";
  DST_RETURN_IF_ERROR(params.ReadChoice("warmup_type", {"log", "linear"}, &name));
  *type = name == "log" ? WarmupType::kLog : WarmupType::kLinear;
  return Status::Ok();
}

Status ReadLastBatchIteration(const ObjectReader &params) {
  int64_t last_batch_iteration = -1;
  return params.ReadInt("last_batch_iteration", &last_batch_iteration, -1, -1);
}

// Warm-up keys shared by WarmupLR and WarmupDecayLR.
Status ReadWarmupLrParams(const ObjectReader &params, double optimizer_lr,
                          SchedulerConfig *scheduler) {
  DST_RETURN_IF_ERROR(
      params.ReadNumber("warmup_min_lr", &scheduler->warmup_min_lr, AtLeast(0), 0.0));
  DST_RETURN_IF_ERROR(
      params.ReadNumber("warmup_max_lr", &scheduler->warmup_max_lr, AtLeast(0), optimizer_lr));
  DST_RETURN_IF_ERROR(
      params.ReadInt("warmup_num_steps", &scheduler->warmup_num_steps, 0, kInt64Max, 0));
  DST_RETURN_IF_ERROR(ReadWarmupType(params, &scheduler->warmup_type));
  return ReadLastBatchIteration(params);
}

// total_num_steps: required, "auto" = the run's step count, and it must
// leave room after the warm-up.
Status ReadTotalNumSteps(const ObjectReader &params, std::string_view type_name,
                         const ConfigContext &context, SchedulerConfig *scheduler) {
  const std::string path = params.PathOf("total_num_steps");
  const Json *value = params.Find("total_num_steps");
  if (value == nullptr) {
    return ConfigError(path + " is missing; " + std::string(type_name) +
                       " needs the length of the schedule: write a number or \"auto\" (= the "
                       "run's step count)");
  }
  const bool is_auto = IsAuto(*value);
  if (is_auto) {
    if (context.total_steps <= 0) {
      return ConfigError(path +
                         " is \"auto\" but the number of training steps is not known; pass the "
                         "number of steps (e.g. dstrain train --steps N) or write a number");
    }
    scheduler->total_num_steps = context.total_steps;
  } else {
    DST_RETURN_IF_ERROR(
        params.ReadInt("total_num_steps", &scheduler->total_num_steps, 1, kInt64Max));
  }
  if (scheduler->total_num_steps <= scheduler->warmup_num_steps) {
    return ConfigError(path + ": expected more than warmup_num_steps " +
                       std::to_string(scheduler->warmup_num_steps) + ", found " +
                       std::to_string(scheduler->total_num_steps) +
                       (is_auto ? " (\"auto\" = the run's step count)" : ""));
  }
  return Status::Ok();
}

Status ReadWarmupCosineParams(const ObjectReader &params, const ConfigContext &context,
                              SchedulerConfig *scheduler) {
  DST_RETURN_IF_ERROR(
      params.ReadNumber("warmup_min_ratio", &scheduler->warmup_min_ratio, Between(0, 1)));
  DST_RETURN_IF_ERROR(params.ReadNumber("cos_min_ratio", &scheduler->cos_min_ratio, Between(0, 1)));
  DST_RETURN_IF_ERROR(
      params.ReadInt("warmup_num_steps", &scheduler->warmup_num_steps, 0, kInt64Max, 0));
  DST_RETURN_IF_ERROR(ReadWarmupType(params, &scheduler->warmup_type));
  DST_RETURN_IF_ERROR(ReadLastBatchIteration(params));
  return ReadTotalNumSteps(params, "WarmupCosineLR", context, scheduler);
}

Status ReadScheduler(const ObjectReader &root, const ConfigContext &context, Parsed *parsed) {
  if (!root.Has("scheduler")) return Status::Ok();
  return ReadSection(root, "scheduler", kScheduler, [&](const ObjectReader &section) -> Status {
    static const std::vector<std::string_view> kSupported = {"WarmupLR", "WarmupDecayLR",
                                                             "WarmupCosineLR"};
    static const std::vector<std::string_view> kRecognised = {"OneCycle", "LRRangeTest"};
    Result<NamedType> type = ReadTypeName(section, kSupported, kRecognised);
    if (!type.ok()) return type.status();
    if (!type->unsupported_name.empty()) {
      parsed->extra.unsupported_scheduler = std::string(type->unsupported_name);
      return Status::Ok();
    }
    SchedulerConfig &scheduler = parsed->config.scheduler;
    const double optimizer_lr = parsed->config.optimizer.lr;  // read before the scheduler
    if (type->name == "WarmupLR") {
      scheduler.type = SchedulerType::kWarmupLR;
      return ReadSection(section, "params", "scheduler.params:WarmupLR",
                         [&](const ObjectReader &params) {
                           return ReadWarmupLrParams(params, optimizer_lr, &scheduler);
                         });
    }
    if (type->name == "WarmupDecayLR") {
      scheduler.type = SchedulerType::kWarmupDecayLR;
      return ReadSection(
          section, "params", "scheduler.params:WarmupDecayLR", [&](const ObjectReader &params) {
            DST_RETURN_IF_ERROR(ReadWarmupLrParams(params, optimizer_lr, &scheduler));
            return ReadTotalNumSteps(params, "WarmupDecayLR", context, &scheduler);
          });
    }
    scheduler.type = SchedulerType::kWarmupCosineLR;
    return ReadSection(section, "params", "scheduler.params:WarmupCosineLR",
                       [&](const ObjectReader &params) {
                         return ReadWarmupCosineParams(params, context, &scheduler);
                       });
  });
}

// offload_optimizer / offload_param (fast_init and offload_param's
// pin_memory are validated so that a pasted config is checked whole;
// offload_optimizer.pin_memory page-locks the transfer buffers on a device).
Status ReadOffload(const ObjectReader &zero, std::string_view key, std::string_view section,
                   ZeroConfig *config) {
  const bool optimizer = section == kOffloadOpt;
  std::string *device =
      optimizer ? &config->offload_optimizer_device : &config->offload_param_device;
  return ReadSection(zero, key, section, [&](const ObjectReader &offload) -> Status {
    DST_RETURN_IF_ERROR(offload.ReadChoice("device", {"none", "cpu", "nvme"}, device));
    bool flag = false;
    DST_RETURN_IF_ERROR(
        offload.ReadBool("pin_memory", optimizer ? &config->offload_optimizer_pin_memory : &flag));
    std::string nvme_path;
    DST_RETURN_IF_ERROR(offload.ReadString("nvme_path", &nvme_path, /*nullable=*/true));
    if (optimizer) {
      double ratio = 1.0;
      config->offload_optimizer_nvme_path = nvme_path;
      DST_RETURN_IF_ERROR(
          offload.ReadInt("buffer_count", &config->offload_optimizer_buffer_count, 2, 1024));
      DST_RETURN_IF_ERROR(
          offload.ReadBool("pipeline_read", &config->offload_optimizer_pipeline_read));
      DST_RETURN_IF_ERROR(
          offload.ReadBool("pipeline_write", &config->offload_optimizer_pipeline_write));
      DST_RETURN_IF_ERROR(offload.ReadBool("fast_init", &flag));
      DST_RETURN_IF_ERROR(offload.ReadNumber("ratio", &ratio, Between(0, 1)));
      if (*device == "nvme" && ratio != 1.0)
        return NotSupported(offload.PathOf("ratio") +
                            ": offloading part of the optimizer state (ZeRO++'s twin-flow) is "
                            "not supported yet; remove it or set 1.0");
    } else {
      config->offload_param_nvme_path = nvme_path;
      DST_RETURN_IF_ERROR(
          offload.ReadInt("buffer_count", &config->offload_param_buffer_count, 1, 1024));
      DST_RETURN_IF_ERROR(
          offload.ReadInt("buffer_size", &config->offload_param_buffer_size, 1, kInt64Max));
      DST_RETURN_IF_ERROR(
          offload.ReadInt("max_in_cpu", &config->offload_param_max_in_cpu, 0, kInt64Max));
    }
    if (*device == "nvme" && nvme_path.empty()) {
      return ConfigError(offload.PathOf("nvme_path") +
                         " is missing; device \"nvme\" needs the directory for its swap files");
    }
    return Status::Ok();
  });
}

// DeepSpeed applies optimizer offload to stages 1-3 and parameter offload to
// stage 3 only; elsewhere it would silently do nothing.
Status CheckOffloadMatchesStage(const ZeroConfig &zero) {
  if (zero.offload_optimizer_device != "none" && zero.stage == 0) {
    return ConfigError(
        "zero_optimization.offload_optimizer.device: offloading the optimizer needs ZeRO stage "
        "1, 2 or 3, but zero_optimization.stage is 0; set device to \"none\" or raise the stage");
  }
  if (zero.offload_param_device != "none" && zero.stage != 3) {
    return ConfigError(
        "zero_optimization.offload_param.device: offloading parameters needs ZeRO stage 3, but "
        "zero_optimization.stage is " +
        std::to_string(zero.stage) + "; set device to \"none\" or use stage 3");
  }
  return Status::Ok();
}

// stage3_gather_16bit_weights_on_model_save and its deprecated fp16 spelling.
Status ReadGatherWeightsOnSave(const ObjectReader &zero_section, ZeroConfig *zero) {
  constexpr std::string_view kCurrent = "stage3_gather_16bit_weights_on_model_save";
  constexpr std::string_view kDeprecated = "stage3_gather_fp16_weights_on_model_save";
  bool deprecated_value = zero->stage3_gather_16bit_weights_on_model_save;
  DST_RETURN_IF_ERROR(zero_section.ReadBool(kDeprecated, &deprecated_value));
  DST_RETURN_IF_ERROR(
      zero_section.ReadBool(kCurrent, &zero->stage3_gather_16bit_weights_on_model_save));
  if (!zero_section.Has(kCurrent)) {
    zero->stage3_gather_16bit_weights_on_model_save = deprecated_value;
  } else if (zero_section.Has(kDeprecated) &&
             deprecated_value != zero->stage3_gather_16bit_weights_on_model_save) {
    return ConfigError(zero_section.PathOf(kDeprecated) + " contradicts " +
                       zero_section.PathOf(kCurrent) + " (the same setting); keep the latter");
  }
  return Status::Ok();
}

// A list of layer type names (kZeroParamTypes, case-insensitive), stored in
// their canonical spelling.
Status ReadParamTypes(const ObjectReader &section, const char *key, std::vector<std::string> *out) {
  const Json *value = section.Find(key);
  if (value == nullptr || value->is_null()) return Status::Ok();
  std::string known;
  for (std::string_view t : kZeroParamTypes) known += (known.empty() ? "" : ", ") + std::string(t);
  if (!value->is_array())
    return Mismatch(section.PathOf(key), "a list of layer types (" + known + ")", *value);
  for (const Json &item : *value) {
    const std::string name = item.is_string() ? item.get<std::string>() : item.dump();
    auto match = std::find_if(kZeroParamTypes.begin(), kZeroParamTypes.end(), [&](auto t) {
      return t.size() == name.size() && strncasecmp(t.data(), name.data(), t.size()) == 0;
    });
    if (!item.is_string() || match == kZeroParamTypes.end())
      return ConfigError(section.PathOf(key) + ": unknown layer type \"" + name + "\"; use " +
                         known);
    out->push_back(std::string(*match));
  }
  return Status::Ok();
}

Status ReadZero(const ObjectReader &root, ZeroConfig *zero) {
  return ReadSection(root, "zero_optimization", kZero, [&](const ObjectReader &section) -> Status {
    DST_RETURN_IF_ERROR(section.ReadInt("stage", &zero->stage, 0, 3));
    DST_RETURN_IF_ERROR(section.ReadBool("overlap_comm", &zero->overlap_comm));
    DST_RETURN_IF_ERROR(section.ReadBool("contiguous_gradients", &zero->contiguous_gradients));
    DST_RETURN_IF_ERROR(section.ReadInt("reduce_bucket_size", &zero->reduce_bucket_size, 0,
                                        kInt64Max, kDefaultZero.reduce_bucket_size));
    DST_RETURN_IF_ERROR(section.ReadInt("allgather_bucket_size", &zero->allgather_bucket_size, 0,
                                        kInt64Max, kDefaultZero.allgather_bucket_size));
    DST_RETURN_IF_ERROR(section.ReadInt("stage3_prefetch_bucket_size",
                                        &zero->stage3_prefetch_bucket_size, 0, kInt64Max,
                                        kDefaultZero.stage3_prefetch_bucket_size));
    DST_RETURN_IF_ERROR(section.ReadInt("stage3_param_persistence_threshold",
                                        &zero->stage3_param_persistence_threshold, 0, kInt64Max,
                                        kDefaultZero.stage3_param_persistence_threshold));
    for (auto [key, list] : {std::pair{"zero_allowed_param_types", &zero->zero_allowed_param_types},
                             std::pair{"zero_force_param_types", &zero->zero_force_param_types}})
      DST_RETURN_IF_ERROR(ReadParamTypes(section, key, list));
    DST_RETURN_IF_ERROR(section.ReadInt("stage3_max_live_parameters",
                                        &zero->stage3_max_live_parameters, 0, kInt64Max));
    DST_RETURN_IF_ERROR(section.ReadInt("stage3_max_reuse_distance",
                                        &zero->stage3_max_reuse_distance, 0, kInt64Max));
    DST_RETURN_IF_ERROR(ReadGatherWeightsOnSave(section, zero));
    // Stage 1-3 tuning with no stage-0 meaning; validated, not stored yet.
    bool flag = false;
    DST_RETURN_IF_ERROR(section.ReadBool("reduce_scatter", &flag));
    DST_RETURN_IF_ERROR(section.ReadBool("allgather_partitions", &flag));
    DST_RETURN_IF_ERROR(section.ReadBool("round_robin_gradients", &flag));
    DST_RETURN_IF_ERROR(section.ReadInt("sub_group_size", &zero->sub_group_size, 1, kInt64Max,
                                        kDefaultZero.sub_group_size));
    DST_RETURN_IF_ERROR(ReadOffload(section, "offload_optimizer", kOffloadOpt, zero));
    DST_RETURN_IF_ERROR(ReadOffload(section, "offload_param", kOffloadParam, zero));
    return CheckOffloadMatchesStage(*zero);
  });
}

Status ReadFp16(const ObjectReader &root, Fp16Config *fp16) {
  return ReadSection(root, "fp16", kFp16, [&](const ObjectReader &section) -> Status {
    constexpr int kIntMax = std::numeric_limits<int>::max();
    bool flag = false;
    DST_RETURN_IF_ERROR(section.ReadBool("enabled", &fp16->enabled, /*if_auto=*/false));
    DST_RETURN_IF_ERROR(section.ReadBool("auto_cast", &flag));
    DST_RETURN_IF_ERROR(section.ReadNumber("loss_scale", &fp16->loss_scale, AtLeast(0)));
    DST_RETURN_IF_ERROR(section.ReadInt("initial_scale_power", &fp16->initial_scale_power, 0, 64));
    DST_RETURN_IF_ERROR(section.ReadInt("loss_scale_window", &fp16->loss_scale_window, 1, kIntMax));
    DST_RETURN_IF_ERROR(section.ReadInt("hysteresis", &fp16->hysteresis, 1, kIntMax));
    DST_RETURN_IF_ERROR(section.ReadBool("consecutive_hysteresis", &fp16->consecutive_hysteresis));
    DST_RETURN_IF_ERROR(ReadParamTypes(section, "fp16_override_modules", &fp16->override_modules));
    return section.ReadNumber("min_loss_scale", &fp16->min_loss_scale, GreaterThan(0));
  });
}

// "bf16" or DeepSpeed's alias "bfloat16", not both.
Status ReadBf16(const ObjectReader &root, bool *enabled,
                std::vector<std::string> *override_modules) {
  if (root.Has("bf16") && root.Has("bfloat16")) {
    return ConfigError(
        "bf16 and bfloat16 are both given; they are the same section (bfloat16 is DeepSpeed's "
        "alias), keep one");
  }
  const bool alias = root.Has("bfloat16");
  return ReadSection(
      root, alias ? "bfloat16" : "bf16", alias ? kBfloat16 : kBf16,
      [&](const ObjectReader &section) -> Status {
        DST_RETURN_IF_ERROR(ReadParamTypes(section, "bf16_override_modules", override_modules));
        return section.ReadBool("enabled", enabled, /*if_auto=*/false);
      });
}

Status ReadPrecision(const ObjectReader &root, Config *config) {
  DST_RETURN_IF_ERROR(ReadFp16(root, &config->fp16));
  DST_RETURN_IF_ERROR(ReadBf16(root, &config->bf16_enabled, &config->bf16_override_modules));
  if (config->fp16.enabled && config->bf16_enabled) {
    return ConfigError(
        "fp16.enabled and bf16.enabled are both true; choose one mixed-precision mode");
  }
  return Status::Ok();
}

Status ReadActivationCheckpointing(const ObjectReader &root,
                                   ActivationCheckpointingConfig *checkpointing) {
  return ReadSection(
      root, "activation_checkpointing", kActCkpt, [&](const ObjectReader &section) -> Status {
        auto &c = *checkpointing;
        c.present = root.Has("activation_checkpointing");
        DST_RETURN_IF_ERROR(section.ReadBool("partition_activations", &c.partition_activations));
        DST_RETURN_IF_ERROR(section.ReadBool("cpu_checkpointing", &c.cpu_checkpointing));
        DST_RETURN_IF_ERROR(
            section.ReadBool("contiguous_memory_optimization", &c.contiguous_memory_optimization));
        const Json *number = section.Find("number_checkpoints");
        if (number == nullptr || !number->is_null()) {  // null = DeepSpeed's unset
          DST_RETURN_IF_ERROR(
              section.ReadInt("number_checkpoints", &c.number_checkpoints, 0, kInt64Max));
        }
        DST_RETURN_IF_ERROR(section.ReadBool("synchronize_checkpoint_boundary",
                                             &c.synchronize_checkpoint_boundary));
        DST_RETURN_IF_ERROR(section.ReadBool("profile", &c.profile));
        DST_RETURN_IF_ERROR(section.ReadChoice("recompute_granularity", {"full", "selective"},
                                               &c.recompute_granularity));
        // DeepSpeed's rule: contiguous buffers hold partitioned activations.
        if (c.contiguous_memory_optimization && !c.partition_activations) {
          return ConfigError(
              "activation_checkpointing.contiguous_memory_optimization needs "
              "partition_activations: true (as in DeepSpeed)");
        }
        return Status::Ok();
      });
}

// tensor_parallel: DeepSpeed's autotp_size or the tutorials' {enabled, tp_size}.
Status ReadTensorParallel(const ObjectReader &root, Parsed *parsed) {
  return ReadSection(
      root, "tensor_parallel", kTensorParallel, [&](const ObjectReader &section) -> Status {
        int64_t autotp_size = 0, tp_size = 1;
        bool enabled = true;
        DST_RETURN_IF_ERROR(section.ReadInt("autotp_size", &autotp_size, 0, kInt64Max));
        DST_RETURN_IF_ERROR(section.ReadBool("enabled", &enabled));
        DST_RETURN_IF_ERROR(section.ReadInt("tp_size", &tp_size, 1, kInt64Max));
        DST_RETURN_IF_ERROR(
            section.ReadBool("sequence_parallel", &parsed->config.sequence_parallel));
        const int64_t autotp_degree = std::max<int64_t>(autotp_size, 1);
        if (section.Has("autotp_size") && section.Has("tp_size") && autotp_degree != tp_size) {
          return ConfigError("tensor_parallel.autotp_size " + std::to_string(autotp_size) +
                             " and tensor_parallel.tp_size " + std::to_string(tp_size) +
                             " disagree; keep one of them");
        }
        const int64_t degree = section.Has("tp_size") ? tp_size : autotp_degree;
        if (!enabled && degree > 1) {
          return ConfigError("tensor_parallel: the size is " + std::to_string(degree) +
                             " but tensor_parallel.enabled is false; remove one of them");
        }
        parsed->config.tp_size = degree;
        if (!section.Has("tp_size")) parsed->extra.tp_size_key = "tensor_parallel.autotp_size";
        return Status::Ok();
      });
}

// pipeline_parallel: the tutorials' {enabled, pp_size, micro_batches}.
Status ReadPipelineParallel(const ObjectReader &root, Config *config) {
  return ReadSection(
      root, "pipeline_parallel", kPipelineParallel, [&](const ObjectReader &section) -> Status {
        bool enabled = true;
        DST_RETURN_IF_ERROR(section.ReadBool("enabled", &enabled));
        DST_RETURN_IF_ERROR(section.ReadInt("pp_size", &config->pp_size, 1, kInt64Max));
        DST_RETURN_IF_ERROR(
            section.ReadInt("micro_batches", &config->pipeline_micro_batches, 1, kInt64Max));
        if (!enabled && config->pp_size > 1) {
          return ConfigError("pipeline_parallel.pp_size is " + std::to_string(config->pp_size) +
                             " but pipeline_parallel.enabled is false; remove one of them");
        }
        return Status::Ok();
      });
}

// A partition method: "parameters", "uniform", "cost" or "type:REGEX" (any
// case for the word, as DeepSpeed compares them lower-cased).
Status CheckPartitionMethod(const std::string &key, std::string *method) {
  std::string lower = *method;
  for (char &c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "parameters" || lower == "uniform" || lower == "cost") {
    *method = lower;
    return Status::Ok();
  }
  if (lower.rfind("type:", 0) == 0 && method->size() > 5) {
    *method = "type:" + method->substr(5);
    return Status::Ok();
  }
  return ConfigError(key + ": \"" + *method +
                     "\" is not a partition method; use \"parameters\" (balanced parameter "
                     "counts), \"uniform\" (layer counts), \"type:REGEX\" (layers whose kind "
                     "matches) or \"cost\" (balanced FLOPs)");
}

// DeepSpeed's own "pipeline" section (PipelineEngine options), with dstrain's
// schedule choice.
Status ReadDeepSpeedPipeline(const ObjectReader &root, Parsed *parsed) {
  PipelineConfig &pipe = parsed->config.pipeline;
  return ReadSection(root, "pipeline", kPipeline, [&](const ObjectReader &section) -> Status {
    int64_t stages = 0;  // 0: "auto" or absent
    DST_RETURN_IF_ERROR(section.ReadInt("stages", &stages, 1, kInt64Max, /*if_auto=*/0));
    bool flag = false;
    if (section.Has("partition") && section.Has("partition_method")) {
      return ConfigError(
          "pipeline.partition and pipeline.partition_method are both given; they are the same "
          "setting, keep one");
    }
    const char *partition_key = section.Has("partition_method") ? "partition_method" : "partition";
    if (section.Has(partition_key)) {
      DST_RETURN_IF_ERROR(section.ReadString(partition_key, &pipe.partition_method));
      DST_RETURN_IF_ERROR(
          CheckPartitionMethod(std::string("pipeline.") + partition_key, &pipe.partition_method));
    }
    if (section.Has("schedule")) {
      DST_RETURN_IF_ERROR(section.ReadChoice("schedule", {"1f1b", "gpipe", "interleaved", "zb-h1"},
                                             &pipe.schedule));
    }
    DST_RETURN_IF_ERROR(section.ReadInt("virtual_stages", &pipe.virtual_stages, 1, kInt64Max));
    if (pipe.virtual_stages > 1 && pipe.schedule != "interleaved") {
      return ConfigError("pipeline.virtual_stages is " + std::to_string(pipe.virtual_stages) +
                         " but pipeline.schedule is \"" + pipe.schedule +
                         "\"; model chunks per rank need \"schedule\": \"interleaved\"");
    }
    DST_RETURN_IF_ERROR(section.ReadBool("seed_layers", &flag));
    if (section.Has("activation_checkpoint_interval")) {
      DST_RETURN_IF_ERROR(section.ReadInt("activation_checkpoint_interval",
                                          &pipe.activation_checkpoint_interval, 0, kInt64Max));
    }
    DST_RETURN_IF_ERROR(section.ReadBool("pipe_partitioned", &flag));
    DST_RETURN_IF_ERROR(section.ReadBool("grad_partitioned", &flag));
    if (stages == 0) return Status::Ok();
    const bool pp_size_given = root.Find("pipeline_parallel") != nullptr &&
                               root.Find("pipeline_parallel")->contains("pp_size");
    if (pp_size_given && stages != parsed->config.pp_size) {
      return ConfigError("pipeline.stages " + std::to_string(stages) +
                         " and pipeline_parallel.pp_size " +
                         std::to_string(parsed->config.pp_size) + " disagree; keep one of them");
    }
    parsed->config.pp_size = stages;
    parsed->extra.pp_size_key = "pipeline.stages";
    return Status::Ok();
  });
}

// A pipeline runs one micro-batch per accumulation step, so
// pipeline_parallel.micro_batches is another way to write the accumulation.
Status MergePipelineMicroBatches(const Config &config, BatchKeys *batch) {
  if (config.pipeline_micro_batches == 0) return Status::Ok();
  if (batch->accumulation && *batch->accumulation != config.pipeline_micro_batches) {
    return ConfigError("pipeline_parallel.micro_batches " +
                       std::to_string(config.pipeline_micro_batches) +
                       " != gradient_accumulation_steps " + std::to_string(*batch->accumulation) +
                       "; a pipeline runs one micro-batch per accumulation step, so set them "
                       "equal or drop one");
  }
  if (!batch->accumulation) batch->accumulation_key = "pipeline_parallel.micro_batches";
  batch->accumulation = config.pipeline_micro_batches;
  return Status::Ok();
}

// communication_data_type, and the articles' compress_communication: true
// (gradients reduced in 16 bits: the training dtype under mixed precision,
// bf16 under fp32 training, unless communication_data_type names one).
Status ReadCommunicationDataType(const ObjectReader &root, DType precision, DType *dtype) {
  bool compress = false;
  DST_RETURN_IF_ERROR(root.ReadBool("compress_communication", &compress));
  const Json *value = root.Find("communication_data_type");
  if (value == nullptr || value->is_null()) {  // DeepSpeed's default: the gradients' dtype
    *dtype = compress && precision == DType::kFloat32 ? DType::kBFloat16 : precision;
    return Status::Ok();
  }
  std::string name;
  DST_RETURN_IF_ERROR(
      root.ReadChoice("communication_data_type",
                      {"fp32", "float32", "fp16", "float16", "bf16", "bfloat16", "bfp16"}, &name));
  if (name == "fp32" || name == "float32") {
    *dtype = DType::kFloat32;
  } else if (name == "fp16" || name == "float16") {
    *dtype = DType::kFloat16;
  } else {
    *dtype = DType::kBFloat16;
  }
  if (compress && *dtype == DType::kFloat32)
    return ConfigError(
        "compress_communication: true asks for 16-bit gradient reduction but "
        "communication_data_type is \"fp32\"; drop one of them");
  return Status::Ok();
}

Status ReadTopLevelScalars(const ObjectReader &root, Parsed *parsed) {
  Config &config = parsed->config;
  ExtraSettings &extra = parsed->extra;
  DST_RETURN_IF_ERROR(root.ReadNumber("gradient_clipping", &config.gradient_clipping, AtLeast(0),
                                      kAutoGradientClipping));
  DST_RETURN_IF_ERROR(
      ReadCommunicationDataType(root, config.precision(), &config.communication_data_type));
  DST_RETURN_IF_ERROR(root.ReadInt("steps_per_print", &config.steps_per_print, 1, kInt64Max));
  DST_RETURN_IF_ERROR(root.ReadBool("wall_clock_breakdown", &config.wall_clock_breakdown));
  DST_RETURN_IF_ERROR(root.ReadBool("prescale_gradients", &config.prescale_gradients));
  DST_RETURN_IF_ERROR(root.ReadNumber("gradient_predivide_factor",
                                      &config.gradient_predivide_factor, GreaterThan(0)));
  DST_RETURN_IF_ERROR(root.ReadBool("sparse_gradients", &extra.sparse_gradients));
  DST_RETURN_IF_ERROR(root.ReadBool("memory_breakdown", &extra.memory_breakdown));
  bool no_effect = false;
  DST_RETURN_IF_ERROR(root.ReadBool("zero_allow_untested_optimizer", &no_effect));
  DST_RETURN_IF_ERROR(root.ReadBool("zero_force_ds_cpu_optimizer", &no_effect));
  return root.ReadBool("dump_state", &no_effect);
}

Status ReadDataTypes(const ObjectReader &root, ExtraSettings *extra) {
  return ReadSection(root, "data_types", kDataTypes, [&](const ObjectReader &section) -> Status {
    const Json *value = section.Find("grad_accum_dtype");
    if (value != nullptr && value->is_null()) return Status::Ok();
    return section.ReadChoice("grad_accum_dtype", {"fp32", "fp16", "bf16"},
                              &extra->grad_accum_dtype);
  });
}

Status ReadCheckpointOptions(const ObjectReader &root, ExtraSettings *extra) {
  return ReadSection(root, "checkpoint", kCheckpoint, [&](const ObjectReader &section) -> Status {
    std::string tag_validation = "Warn";
    bool node_local = false;
    DST_RETURN_IF_ERROR(
        section.ReadChoice("tag_validation", {"Ignore", "Warn", "Fail"}, &tag_validation));
    DST_RETURN_IF_ERROR(section.ReadBool("load_universal", &extra->load_universal));
    return section.ReadBool("use_node_local_storage", &node_local);
  });
}

// DeepSpeed's monitors: recognised, and off unless enabled; the flops profiler.
Status ReadMonitors(const ObjectReader &root, FlopsProfilerConfig *flops, ExtraSettings *extra) {
  const auto record_enabled = [&](std::string_view name, bool enabled) {
    if (enabled && extra->enabled_monitor.empty()) extra->enabled_monitor = name;
  };
  DST_RETURN_IF_ERROR(
      ReadSection(root, "flops_profiler", "flops_profiler", [&](const ObjectReader &s) -> Status {
        double factor = 0;
        DST_RETURN_IF_ERROR(s.ReadBool("enabled", &flops->enabled));
        DST_RETURN_IF_ERROR(s.ReadNumber("recompute_fwd_factor", &factor, AtLeast(0)));
        DST_RETURN_IF_ERROR(s.ReadInt("profile_step", &flops->profile_step, 0, kInt64Max));
        DST_RETURN_IF_ERROR(s.ReadInt("module_depth", &flops->module_depth, -1, kInt64Max));
        DST_RETURN_IF_ERROR(s.ReadInt("top_modules", &flops->top_modules, 0, kInt64Max));
        DST_RETURN_IF_ERROR(s.ReadBool("detailed", &flops->detailed));
        return s.ReadString("output_file", &flops->output_file, /*nullable=*/true);
      }));
  for (std::string_view name : {"tensorboard"}) {
    DST_RETURN_IF_ERROR(ReadSection(root, name, name, [&](const ObjectReader &s) -> Status {
      bool enabled = false;
      std::string text;
      DST_RETURN_IF_ERROR(s.ReadBool("enabled", &enabled));
      DST_RETURN_IF_ERROR(s.ReadString("output_path", &text));
      DST_RETURN_IF_ERROR(s.ReadString("job_name", &text));
      record_enabled(name, enabled);
      return Status::Ok();
    }));
  }
  DST_RETURN_IF_ERROR(ReadSection(root, "wandb", "wandb", [&](const ObjectReader &s) -> Status {
    bool enabled = false;
    std::string text;
    DST_RETURN_IF_ERROR(s.ReadBool("enabled", &enabled));
    DST_RETURN_IF_ERROR(s.ReadString("group", &text, /*nullable=*/true));
    DST_RETURN_IF_ERROR(s.ReadString("team", &text, /*nullable=*/true));
    DST_RETURN_IF_ERROR(s.ReadString("project", &text));
    record_enabled("wandb", enabled);
    return Status::Ok();
  }));
  return ReadSection(root, "comms_logger", "comms_logger", [&](const ObjectReader &s) -> Status {
    bool enabled = false, flag = false;
    DST_RETURN_IF_ERROR(s.ReadBool("enabled", &enabled));
    DST_RETURN_IF_ERROR(s.ReadBool("verbose", &flag));
    DST_RETURN_IF_ERROR(s.ReadBool("prof_all", &flag));
    DST_RETURN_IF_ERROR(s.ReadBool("debug", &flag));
    DST_RETURN_IF_ERROR(s.ReadStringList("prof_ops"));
    record_enabled("comms_logger", enabled);
    return Status::Ok();
  });
}

Status ReadAmp(const ObjectReader &root, ExtraSettings *extra) {
  // The other keys are apex options, passed through untouched by DeepSpeed.
  return ReadSection(root, "amp", kAmp, [&](const ObjectReader &section) {
    return section.ReadBool("enabled", &extra->amp_enabled);
  });
}

Status ReadAio(const ObjectReader &root, AioConfig *aio) {
  aio->present = root.Has("aio");
  return ReadSection(root, "aio", kAio, [&](const ObjectReader &section) -> Status {
    DST_RETURN_IF_ERROR(section.ReadInt("block_size", &aio->block_size, 4096, kInt64Max));
    DST_RETURN_IF_ERROR(section.ReadInt("queue_depth", &aio->queue_depth, 1, 4096));
    // DeepSpeed's older spelling of intra_op_parallelism.
    DST_RETURN_IF_ERROR(section.ReadInt("thread_count", &aio->intra_op_parallelism, 1, 1024));
    DST_RETURN_IF_ERROR(
        section.ReadInt("intra_op_parallelism", &aio->intra_op_parallelism, 1, 1024));
    DST_RETURN_IF_ERROR(section.ReadBool("single_submit", &aio->single_submit));
    DST_RETURN_IF_ERROR(section.ReadBool("overlap_events", &aio->overlap_events));
    DST_RETURN_IF_ERROR(section.ReadBool("use_gds", &aio->use_gds));
    if (aio->use_gds)
      return NotSupported(section.PathOf("use_gds") +
                          ": GPUDirect Storage moves data between NVMe and GPU memory; this "
                          "engine has no GPU path yet. Set it to false");
    return Status::Ok();
  });
}

// gradient_compression {enabled, algorithm, topk_ratio, huffman_coding,
// warmup_steps, momentum_correction, chunk_size, target}: on
// when the section is present, unless "enabled": false.
Status ReadGradientCompression(const ObjectReader &root, GradientCompressionConfig *gc) {
  gc->enabled = root.Has("gradient_compression");
  return ReadSection(
      root, "gradient_compression", kGradCompression, [&](const ObjectReader &section) -> Status {
        DST_RETURN_IF_ERROR(section.ReadBool("enabled", &gc->enabled));
        DST_RETURN_IF_ERROR(
            section.ReadChoice("algorithm", {"topk", "1bit", "2bit"}, &gc->algorithm));
        DST_RETURN_IF_ERROR(
            section.ReadNumber("topk_ratio", &gc->topk_ratio, Range{0, 1, true, false}));
        DST_RETURN_IF_ERROR(section.ReadBool("huffman_coding", &gc->huffman_coding));
        DST_RETURN_IF_ERROR(section.ReadInt("warmup_steps", &gc->warmup_steps, 0,
                                            std::numeric_limits<int64_t>::max()));
        DST_RETURN_IF_ERROR(section.ReadBool("momentum_correction", &gc->momentum_correction));
        DST_RETURN_IF_ERROR(section.ReadInt("chunk_size", &gc->chunk_size, 1, int64_t(1) << 30));
        DST_RETURN_IF_ERROR(section.ReadChoice("target", {"gradient", "update"}, &gc->target));
        if (gc->huffman_coding && gc->algorithm != "topk" && gc->enabled)
          return ConfigError(section.PathOf("huffman_coding") +
                             ": Huffman coding applies to top-k's indices; algorithm \"" +
                             gc->algorithm +
                             "\" sends packed bits with nothing to code. Set huffman_coding to "
                             "false or use \"topk\"");
        return Status::Ok();
      });
}

// communication {enabled, topology, slow_node_tolerance}.
Status ReadCommunication(const ObjectReader &root, CommunicationConfig *comm) {
  return ReadSection(root, "communication", kCommunication, [&](const ObjectReader &s) -> Status {
    bool enabled = true;
    DST_RETURN_IF_ERROR(s.ReadBool("enabled", &enabled));
    double tolerance = -1;
    DST_RETURN_IF_ERROR(s.ReadNumber("slow_node_tolerance", &tolerance, AtLeast(0)));
    const Json *topology = s.Find("topology");
    std::string shape = "tree";
    if (topology != nullptr && topology->is_number_integer()) {
      if (topology->get<int64_t>() != 3)
        return NotSupported(s.PathOf("topology") + " " + topology->dump() +
                            ": the integer form means one level per axis of the 3D grid and "
                            "only 3 (dp, tp, pp) exists here; use 3 or \"tree\"");
      shape = "3";
    } else if (topology != nullptr) {
      DST_RETURN_IF_ERROR(s.ReadChoice("topology", {"tree", "ring", "hierarchical"}, &shape));
    }
    if (!enabled) return Status::Ok();
    comm->topology = shape;
    comm->slow_node_tolerance = tolerance;
    return Status::Ok();
  });
}

// DeepSpeed features without a dstrain counterpart: accepted only when the
// section says "enabled": false (their other keys are then irrelevant).
Status ReadFeatureSections(const ObjectReader &root, ExtraSettings *extra) {
  for (std::string_view name :
       {"elasticity", "compression_training", "curriculum_learning", "data_efficiency",
        "progressive_layer_drop", "eigenvalue", "sparse_attention", "hybrid_engine", "nebula"}) {
    const Json *section = root.Find(name);
    if (section == nullptr) continue;
    if (!section->is_object()) return root.MismatchAt(name, *section);
    const auto enabled = section->find("enabled");
    if (enabled != section->end() && !enabled->is_boolean()) {
      return Mismatch(root.PathOf(name) + ".enabled", "true or false", *enabled);
    }
    const bool disabled = enabled != section->end() && !enabled->get<bool>();
    if (!disabled && extra->enabled_feature.empty()) extra->enabled_feature = name;
  }
  return Status::Ok();
}

// DeepSpeed's autotuning section: every key checked here (so a typo is named
// before a tuner runs trials on it); the engine keeps what a trial needs.
Status ReadAutotuning(const ObjectReader &root, AutotuningConfig *tuning) {
  return ReadSection(root, "autotuning", "autotuning", [&](const ObjectReader &s) -> Status {
    bool flag = false;
    int64_t count = 0;
    std::string text;
    DST_RETURN_IF_ERROR(s.ReadBool("enabled", &tuning->enabled));
    for (std::string_view key : {"fast", "overwrite"}) DST_RETURN_IF_ERROR(s.ReadBool(key, &flag));
    for (std::string_view key : {"results_dir", "exps_dir", "model_info_path"})
      DST_RETURN_IF_ERROR(s.ReadString(key, &text, /*nullable=*/true));
    DST_RETURN_IF_ERROR(s.ReadString("metric_path", &tuning->metric_path, /*nullable=*/true));
    DST_RETURN_IF_ERROR(
        s.ReadChoice("metric", {"throughput", "latency", "flops"}, &tuning->metric));
    DST_RETURN_IF_ERROR(s.ReadChoice("tuner_type", {"gridsearch", "random", "model_based"}, &text));
    DST_RETURN_IF_ERROR(s.ReadInt("start_profile_step", &tuning->start_profile_step, 0, kInt64Max));
    DST_RETURN_IF_ERROR(s.ReadInt("end_profile_step", &tuning->end_profile_step, 0, kInt64Max));
    if (tuning->end_profile_step < tuning->start_profile_step)
      return InvalidArgument(s.PathOf("end_profile_step") + " " +
                             std::to_string(tuning->end_profile_step) + " is before " +
                             s.PathOf("start_profile_step") + " " +
                             std::to_string(tuning->start_profile_step) +
                             ": a trial measures the steps from the start to the end");
    const Json *max_batch = s.Find("max_train_batch_size");
    if (max_batch == nullptr || !max_batch->is_null())
      DST_RETURN_IF_ERROR(s.ReadInt("max_train_batch_size", &count, 1, kInt64Max));
    for (std::string_view key :
         {"min_train_batch_size", "max_train_micro_batch_size_per_gpu",
          "min_train_micro_batch_size_per_gpu", "num_tuning_micro_batch_sizes",
          "tuner_early_stopping", "tuner_num_trials", "mp_size"})
      DST_RETURN_IF_ERROR(s.ReadInt(key, &count, 1, kInt64Max));
    Result<ObjectReader> mappings = s.Child("arg_mappings", "autotuning.arg_mappings");
    if (!mappings.ok()) return mappings.status();
    if (const Json *given = s.Find("arg_mappings"))
      for (const auto &[key, value] : given->items())
        if (!value.is_string())
          return Mismatch(mappings->PathOf(key), "a string (the program's argument)", value);
    Result<ObjectReader> info = s.Child("model_info", "autotuning.model_info");
    return info.status();
  });
}

// DeepSpeed's csv_monitor: our metrics log in CSV, in output_path/job_name/.
Status ReadCsvMonitor(const ObjectReader &root, MonitorConfig *monitor) {
  return ReadSection(root, "csv_monitor", "csv_monitor", [&](const ObjectReader &s) -> Status {
    bool enabled = false;
    std::string output_path = "csv_monitor", job_name = "DeepSpeedJobName";
    DST_RETURN_IF_ERROR(s.ReadBool("enabled", &enabled));
    DST_RETURN_IF_ERROR(s.ReadString("output_path", &output_path));
    DST_RETURN_IF_ERROR(s.ReadString("job_name", &job_name));
    if (!enabled) return Status::Ok();
    monitor->log.enabled = true;
    monitor->log.format = "csv";
    monitor->log.path = (output_path.empty() ? std::string(".") : output_path) + "/" + job_name;
    return Status::Ok();
  });
}

// A job label goes into every metric's labels and into file names.
bool IsJobLabel(const std::string &text) {
  if (text.empty() || text.size() > 128) return false;
  for (char c : text) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status ReadMonitorHttp(const ObjectReader &monitor, MonitorHttpConfig *http) {
  return ReadSection(monitor, "http", "dstrain.monitor.http", [&](const ObjectReader &s) -> Status {
    DST_RETURN_IF_ERROR(s.ReadBool("enabled", &http->enabled));
    DST_RETURN_IF_ERROR(s.ReadString("host", &http->host));
    if (http->host.empty()) {
      return ConfigError(s.PathOf("host") +
                         ": expected an IP address such as \"127.0.0.1\", found \"\"");
    }
    DST_RETURN_IF_ERROR(s.ReadInt("port", &http->port, 0, 65535));
    return s.ReadString("token", &http->token);
  });
}

Status ReadMonitorLog(const ObjectReader &monitor, MonitorLogConfig *log) {
  return ReadSection(monitor, "log", "dstrain.monitor.log", [&](const ObjectReader &s) -> Status {
    DST_RETURN_IF_ERROR(s.ReadBool("enabled", &log->enabled));
    DST_RETURN_IF_ERROR(s.ReadString("path", &log->path));
    return s.ReadChoice("format", {"csv", "jsonl"}, &log->format);
  });
}

Status ReadMonitor(const ObjectReader &dstrain, MonitorConfig *monitor) {
  return ReadSection(dstrain, "monitor", "dstrain.monitor", [&](const ObjectReader &s) -> Status {
    DST_RETURN_IF_ERROR(s.ReadBool("enabled", &monitor->enabled));
    if (s.Has("job")) {
      DST_RETURN_IF_ERROR(s.ReadString("job", &monitor->job));
      if (!IsJobLabel(monitor->job)) {
        return ConfigError(s.PathOf("job") +
                           ": expected 1-128 characters of [A-Za-z0-9_.-], found \"" +
                           monitor->job + "\"");
      }
    }
    DST_RETURN_IF_ERROR(s.ReadInt("history_steps", &monitor->history_steps, 1, 10000000));
    DST_RETURN_IF_ERROR(
        s.ReadNumber("peak_flops_per_second", &monitor->peak_flops_per_second, AtLeast(0)));
    DST_RETURN_IF_ERROR(ReadMonitorHttp(s, &monitor->http));
    return ReadMonitorLog(s, &monitor->log);
  });
}

// dstrain.trace {enabled, steps (a list of global steps, or a count N: 1..N), path}.
Status ReadTrace(const ObjectReader &dstrain, TraceConfig *trace) {
  return ReadSection(dstrain, "trace", "dstrain.trace", [&](const ObjectReader &s) -> Status {
    DST_RETURN_IF_ERROR(s.ReadBool("enabled", &trace->enabled));
    DST_RETURN_IF_ERROR(s.ReadString("path", &trace->path));
    const Json *steps = s.Find("steps");
    if (steps == nullptr) return Status::Ok();
    const char *expected = "a list of integers >= 0, or a count";
    if (steps->is_number_integer() && steps->get<int64_t>() > 0) {
      trace->steps.clear();
      for (int64_t k = 1; k <= steps->get<int64_t>(); ++k) trace->steps.push_back(k);
      return Status::Ok();
    }
    if (!steps->is_array() || steps->empty()) return Mismatch(s.PathOf("steps"), expected, *steps);
    trace->steps.clear();
    for (const Json &step : *steps) {
      if (!step.is_number_integer() || step.get<int64_t>() < 0)
        return Mismatch(s.PathOf("steps"), expected, *steps);
      trace->steps.push_back(step.get<int64_t>());
    }
    return Status::Ok();
  });
}

Status ReadDstrain(const ObjectReader &root, Config *config) {
  RuntimeConfig *runtime = &config->runtime;
  return ReadSection(root, "dstrain", kDstrain, [&](const ObjectReader &section) -> Status {
    DST_RETURN_IF_ERROR(
        section.ReadInt("num_threads", &runtime->num_threads, 0, std::numeric_limits<int>::max()));
    DST_RETURN_IF_ERROR(
        section.ReadNumber("comm_timeout_seconds", &runtime->comm_timeout_seconds, GreaterThan(0)));
    DST_RETURN_IF_ERROR(section.ReadUint("seed", &runtime->seed));
    DST_RETURN_IF_ERROR(section.ReadBool("resume_from_swap", &runtime->resume_from_swap));
    DST_RETURN_IF_ERROR(section.ReadString("device", &runtime->device));
    if (runtime->device != "cpu" && runtime->device != "cuda")
      return ConfigError(section.PathOf("device") + ": \"" + runtime->device +
                         "\" is not a device dstrain trains on; use \"cpu\" or \"cuda\" (the "
                         "GPU LOCAL_RANK names)");
    if (runtime->resume_from_swap && config->zero.offload_optimizer_device != "nvme")
      return ConfigError(section.PathOf("resume_from_swap") +
                         " needs the optimizer's NVMe tier (zero_optimization.offload_optimizer."
                         "device \"nvme\"): only its swap files hold a committed step");
    DST_RETURN_IF_ERROR(section.ReadStringList("notes"));
    DST_RETURN_IF_ERROR(ReadTrace(section, &config->trace));
    return ReadMonitor(section, &config->monitor);
  });
}

}  // namespace

// Stray top-level keys: an error, or with dstrain.unknown_keys "warn" a
// warning naming each (the rest of the config is still checked strictly).
Status CheckTopLevelKeys(const ObjectReader &root, RuntimeConfig *runtime) {
  const Json *dstrain = root.Find("dstrain");
  const Json *mode = dstrain && dstrain->is_object() && dstrain->contains("unknown_keys")
                         ? &dstrain->at("unknown_keys")
                         : nullptr;
  if (mode && !(mode->is_string() && (*mode == "warn" || *mode == "error")))
    return ConfigError(config_internal::ChildPath(root.PathOf("dstrain"), "unknown_keys") +
                       ": expected \"error\" (default) or \"warn\", found " + mode->dump());
  runtime->warn_unknown_keys = mode && *mode == "warn";
  if (!runtime->warn_unknown_keys) return root.CheckKeys();
  for (const std::string &key : root.UnknownKeys()) {
    runtime->ignored_keys.push_back(key);
    DST_LOG(kWarning, "config",
            "unknown top-level key \"" + key + "\" ignored (dstrain.unknown_keys is \"warn\")");
  }
  return Status::Ok();
}

Status ReadAll(const ObjectReader &root, const ConfigContext &context, Parsed *parsed) {
  Config &config = parsed->config;
  DST_RETURN_IF_ERROR(CheckTopLevelKeys(root, &config.runtime));
  DST_RETURN_IF_ERROR(ReadBatchKeys(root, &parsed->batch));
  DST_RETURN_IF_ERROR(ReadOptimizer(root, parsed));
  DST_RETURN_IF_ERROR(ReadScheduler(root, context, parsed));  // after: "auto" lr = optimizer lr
  DST_RETURN_IF_ERROR(ReadZero(root, &config.zero));
  DST_RETURN_IF_ERROR(ReadPrecision(root, &config));
  DST_RETURN_IF_ERROR(ReadActivationCheckpointing(root, &config.activation_checkpointing));
  DST_RETURN_IF_ERROR(ReadTensorParallel(root, parsed));
  DST_RETURN_IF_ERROR(ReadPipelineParallel(root, &config));
  DST_RETURN_IF_ERROR(ReadDeepSpeedPipeline(root, parsed));  // after: compares with pp_size
  DST_RETURN_IF_ERROR(MergePipelineMicroBatches(config, &parsed->batch));
  DST_RETURN_IF_ERROR(ReadTopLevelScalars(root, parsed));
  DST_RETURN_IF_ERROR(ReadDataTypes(root, &parsed->extra));
  DST_RETURN_IF_ERROR(ReadCheckpointOptions(root, &parsed->extra));
  DST_RETURN_IF_ERROR(ReadMonitors(root, &config.flops_profiler, &parsed->extra));
  DST_RETURN_IF_ERROR(ReadCsvMonitor(root, &config.monitor));
  DST_RETURN_IF_ERROR(ReadAmp(root, &parsed->extra));
  DST_RETURN_IF_ERROR(ReadAio(root, &config.aio));
  DST_RETURN_IF_ERROR(ReadFeatureSections(root, &parsed->extra));
  DST_RETURN_IF_ERROR(ReadAutotuning(root, &config.autotuning));
  DST_RETURN_IF_ERROR(ReadGradientCompression(root, &config.gradient_compression));
  DST_RETURN_IF_ERROR(ReadCommunication(root, &config.communication));
  DST_RETURN_IF_ERROR(ReadDstrain(root, &config));  // after: dstrain.monitor.log wins
  MonitorConfig &monitor = config.monitor;
  if (monitor.http.enabled || monitor.log.enabled) monitor.enabled = true;
  return Status::Ok();
}

}  // namespace dst::config_phases
