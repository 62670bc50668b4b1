// ds_config phase 4: the resolved config (see config_phases.h).
#include "core/config/config_phases.h"

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

// ---------------------------------------------------------------------------
// Phase 4: the resolved config, in DeepSpeed's spelling. Parsing it again
// (with the same context) yields the same Config.

const char *WarmupTypeName(WarmupType type) {
  return type == WarmupType::kLog ? "log" : "linear";
}

Json OptimizerJson(const OptimizerConfig &optimizer) {
  Json params = Json::object();
  params["lr"] = optimizer.lr;
  if (optimizer.type == OptimizerType::kSGD) {
    params["momentum"] = optimizer.momentum;
    params["dampening"] = optimizer.dampening;
    params["weight_decay"] = optimizer.weight_decay;
    params["nesterov"] = optimizer.nesterov;
    return Json{{"type", "SGD"}, {"params", params}};
  }
  params["betas"] = optimizer.betas;
  params["eps"] = optimizer.eps;
  params["weight_decay"] = optimizer.weight_decay;
  if (optimizer.type == OptimizerType::kZeroOneAdam) {
    params["var_freeze_step"] = optimizer.var_freeze_step;
    params["var_update_scaler"] = optimizer.var_update_scaler;
    params["local_step_scaler"] = optimizer.local_step_scaler;
    params["local_step_clipper"] = optimizer.local_step_clipper;
    return Json{{"type", "ZeroOneAdam"}, {"params", params}};
  }
  if (optimizer.type == OptimizerType::kOneBitLamb) {
    params["freeze_step"] = optimizer.freeze_step;
    params["max_coeff"] = optimizer.max_coeff;
    params["min_coeff"] = optimizer.min_coeff;
    params["coeff_beta"] = optimizer.coeff_beta;
    params["factor_max"] = optimizer.factor_max;
    params["factor_min"] = optimizer.factor_min;
    params["factor_threshold"] = optimizer.factor_threshold;
    return Json{{"type", "OneBitLamb"}, {"params", params}};
  }
  if (optimizer.type == OptimizerType::kOneBitAdam) {
    params["freeze_step"] = optimizer.freeze_step;
    return Json{{"type", "OneBitAdam"}, {"params", params}};
  }
  if (optimizer.type == OptimizerType::kLamb) {
    params["bias_correction"] = optimizer.bias_correction;
    params["eps_inside_sqrt"] = optimizer.eps_inside_sqrt;
    params["max_coeff"] = optimizer.max_coeff;
    params["min_coeff"] = optimizer.min_coeff;
    return Json{{"type", "Lamb"}, {"params", params}};
  }
  params["adam_w_mode"] = optimizer.adam_w_mode;
  params["bias_correction"] = optimizer.bias_correction;
  const bool is_adamw = optimizer.type == OptimizerType::kAdamW;
  return Json{{"type", is_adamw ? "AdamW" : "Adam"}, {"params", params}};
}

Json SchedulerJson(const SchedulerConfig &scheduler) {
  Json params = Json::object();
  const char *type = "WarmupCosineLR";
  if (scheduler.type == SchedulerType::kWarmupCosineLR) {
    params["total_num_steps"] = scheduler.total_num_steps;
    params["warmup_min_ratio"] = scheduler.warmup_min_ratio;
    params["warmup_num_steps"] = scheduler.warmup_num_steps;
    params["cos_min_ratio"] = scheduler.cos_min_ratio;
    params["warmup_type"] = WarmupTypeName(scheduler.warmup_type);
  } else {
    type = scheduler.type == SchedulerType::kWarmupLR ? "WarmupLR" : "WarmupDecayLR";
    params["warmup_min_lr"] = scheduler.warmup_min_lr;
    params["warmup_max_lr"] = scheduler.warmup_max_lr;
    params["warmup_num_steps"] = scheduler.warmup_num_steps;
    params["warmup_type"] = WarmupTypeName(scheduler.warmup_type);
    if (scheduler.type == SchedulerType::kWarmupDecayLR) {
      params["total_num_steps"] = scheduler.total_num_steps;
    }
  }
  return Json{{"type", type}, {"params", params}};
}

Json ZeroJson(const ZeroConfig &zero) {
  Json out = Json::object();
  out["stage"] = zero.stage;
  out["overlap_comm"] = zero.overlap_comm;
  out["contiguous_gradients"] = zero.contiguous_gradients;
  out["reduce_bucket_size"] = zero.reduce_bucket_size;
  out["allgather_bucket_size"] = zero.allgather_bucket_size;
  out["stage3_prefetch_bucket_size"] = zero.stage3_prefetch_bucket_size;
  out["stage3_param_persistence_threshold"] = zero.stage3_param_persistence_threshold;
  out["stage3_max_live_parameters"] = zero.stage3_max_live_parameters;
  out["stage3_max_reuse_distance"] = zero.stage3_max_reuse_distance;
  out["stage3_gather_16bit_weights_on_model_save"] = zero.stage3_gather_16bit_weights_on_model_save;
  out["sub_group_size"] = zero.sub_group_size;
  out["offload_optimizer"] = Json{{"device", zero.offload_optimizer_device}};
  if (zero.offload_optimizer_device != "none")
    out["offload_optimizer"]["pin_memory"] = zero.offload_optimizer_pin_memory;
  if (zero.offload_optimizer_device == "nvme") {
    out["offload_optimizer"]["nvme_path"] = zero.offload_optimizer_nvme_path;
    out["offload_optimizer"]["buffer_count"] = zero.offload_optimizer_buffer_count;
    out["offload_optimizer"]["pipeline_read"] = zero.offload_optimizer_pipeline_read;
    out["offload_optimizer"]["pipeline_write"] = zero.offload_optimizer_pipeline_write;
  }
  out["offload_param"] = Json{{"device", zero.offload_param_device}};
  if (zero.offload_param_device == "nvme") {
    out["offload_param"]["nvme_path"] = zero.offload_param_nvme_path;
    out["offload_param"]["buffer_count"] = zero.offload_param_buffer_count;
    out["offload_param"]["buffer_size"] = zero.offload_param_buffer_size;
    out["offload_param"]["max_in_cpu"] = zero.offload_param_max_in_cpu;
  }
  return out;
}

Json Fp16Json(const Fp16Config &fp16) {
  Json out = Json::object();
  out["enabled"] = fp16.enabled;
  out["loss_scale"] = fp16.loss_scale;
  out["initial_scale_power"] = fp16.initial_scale_power;
  out["loss_scale_window"] = fp16.loss_scale_window;
  out["hysteresis"] = fp16.hysteresis;
  out["consecutive_hysteresis"] = fp16.consecutive_hysteresis;
  out["min_loss_scale"] = fp16.min_loss_scale;
  return out;
}

std::string RecomputeNote(const Config &config) {
  const int64_t interval = config.recompute_interval();
  if (config.selective_recompute())
    return "selective (every transformer block keeps its activations but the attention "
           "probabilities, recomputed from Q and K in backward)";
  if (interval == 1) return "full, every layer (each layer's input kept, the rest recomputed)";
  if (interval > 1)
    return "full, every " + std::to_string(interval) +
           " layers (each group's input kept, the group's forward recomputed in its backward)";
  return "off";
}

// What some settings mean on this engine, so nobody expects more of them.
Json Notes(const Config &config) {
  Json notes = Json::array();
  notes.push_back("activation recomputation: " + RecomputeNote(config));
  if (!config.runtime.ignored_keys.empty()) {
    std::string keys;
    for (const std::string &k : config.runtime.ignored_keys) keys += (keys.empty() ? "" : ", ") + k;
    notes.push_back("unknown top-level keys ignored (dstrain.unknown_keys \"warn\"): " + keys);
  }
  const ActivationCheckpointingConfig &c = config.activation_checkpointing;
  if (c.partition_activations && config.tp_size == 1)
    notes.push_back(
        "activation_checkpointing.partition_activations: tensor-parallel size 1, there is "
        "nothing to partition the kept inputs across");
  if (c.partition_activations && config.tp_size > 1)
    notes.push_back(
        config.sequence_parallel
            ? "activation_checkpointing.partition_activations: the kept inputs are split across "
              "the tp ranks by sequence parallelism"
            : "activation_checkpointing.partition_activations: every tp rank keeps the whole "
              "inputs; tensor_parallel.sequence_parallel splits them (and the LayerNorms' "
              "activations) across the tp ranks");
  if (config.sequence_parallel && config.tp_size == 1)
    notes.push_back(
        "tensor_parallel.sequence_parallel: tensor-parallel size 1, nothing to split (as "
        "Megatron, it is off)");
  if (config.zero.offload_optimizer_device == "cpu")
    notes.push_back(
        "zero_optimization.offload_optimizer.device \"cpu\": this CPU engine keeps the optimizer "
        "state and fp32 master weights in host memory already; nothing moves (on a GPU it is "
        "host offload)");
  if (config.zero.offload_param_device == "cpu")
    notes.push_back(
        "zero_optimization.offload_param.device \"cpu\": this CPU engine keeps the parameters in "
        "host memory already; nothing moves (on a GPU it is host offload)");
  if (config.zero.offload_param_device == "nvme")
    notes.push_back(
        "zero_optimization.offload_param.device \"nvme\": each rank keeps the first max_in_cpu (" +
        std::to_string(config.zero.offload_param_max_in_cpu) +
        ") elements of its parameter shard in memory and the rest in its swap file, read a "
        "layer ahead of its gather into buffer_count windows");
  if (c.cpu_checkpointing)
    notes.push_back(
        "activation_checkpointing.cpu_checkpointing: the CPU engine keeps activations in host "
        "memory already");
  return notes;
}

Json ActivationCheckpointingJson(const ActivationCheckpointingConfig &c) {
  Json out = Json::object();
  out["partition_activations"] = c.partition_activations;
  out["cpu_checkpointing"] = c.cpu_checkpointing;
  out["contiguous_memory_optimization"] = c.contiguous_memory_optimization;
  out["number_checkpoints"] = c.number_checkpoints;
  out["synchronize_checkpoint_boundary"] = c.synchronize_checkpoint_boundary;
  out["profile"] = c.profile;
  out["recompute_granularity"] = c.recompute_granularity;
  return out;
}

// The token is a secret: the resolved config (served by /api/v1/config and
// printed by reports) says only whether one is set.
Json MonitorJson(const MonitorConfig &m) {
  return Json{
      {"enabled", m.enabled},
      {"job", m.job},
      {"history_steps", m.history_steps},
      {"peak_flops_per_second", m.peak_flops_per_second},
      {"http",
       {{"enabled", m.http.enabled},
        {"host", m.http.host},
        {"port", m.http.port},
        {"token", m.http.token.empty() ? "" : "<set>"}}},
      {"log", {{"enabled", m.log.enabled}, {"path", m.log.path}, {"format", m.log.format}}}};
}

}  // namespace

std::string ResolvedJson(const Config &config) {
  Json out = Json::object();
  out["train_batch_size"] = config.train_batch_size;
  out["train_micro_batch_size_per_gpu"] = config.train_micro_batch_size_per_gpu;
  out["gradient_accumulation_steps"] = config.gradient_accumulation_steps;
  out["optimizer"] = OptimizerJson(config.optimizer);
  if (config.scheduler.type != SchedulerType::kNone) {
    out["scheduler"] = SchedulerJson(config.scheduler);
  }
  out["zero_optimization"] = ZeroJson(config.zero);
  if (config.aio.present || config.zero.offload_optimizer_device == "nvme")
    out["aio"] = Json{{"block_size", config.aio.block_size},
                      {"queue_depth", config.aio.queue_depth},
                      {"intra_op_parallelism", config.aio.intra_op_parallelism},
                      {"single_submit", config.aio.single_submit},
                      {"overlap_events", config.aio.overlap_events},
                      {"use_gds", config.aio.use_gds}};
  out["fp16"] = Fp16Json(config.fp16);
  out["bf16"] = Json{{"enabled", config.bf16_enabled}};
  out["gradient_clipping"] = config.gradient_clipping;
  out["communication_data_type"] = DTypeName(config.communication_data_type);
  out["steps_per_print"] = config.steps_per_print;
  out["wall_clock_breakdown"] = config.wall_clock_breakdown;
  // Present only when given: the section itself turns recomputation on.
  if (config.activation_checkpointing.present)
    out["activation_checkpointing"] = ActivationCheckpointingJson(config.activation_checkpointing);
  out["tensor_parallel"] =
      Json{{"tp_size", config.tp_size}, {"sequence_parallel", config.sequence_parallel}};
  Json pipeline = Json{{"pp_size", config.pp_size}};
  if (config.pipeline_micro_batches > 0) {
    pipeline["micro_batches"] = config.pipeline_micro_batches;
  }
  out["pipeline_parallel"] = pipeline;
  Json deepspeed_pipeline = Json{{"partition_method", config.pipeline.partition_method},
                                 {"schedule", config.pipeline.schedule},
                                 {"virtual_stages", config.pipeline.virtual_stages}};
  if (config.pipeline.activation_checkpoint_interval >= 0)
    deepspeed_pipeline["activation_checkpoint_interval"] =
        config.pipeline.activation_checkpoint_interval;
  out["pipeline"] = deepspeed_pipeline;
  out["dstrain"] = Json{{"notes", Notes(config)},
                        {"num_threads", config.runtime.num_threads},
                        {"seed", config.runtime.seed},
                        {"comm_timeout_seconds", config.runtime.comm_timeout_seconds},
                        {"resume_from_swap", config.runtime.resume_from_swap},
                        {"device", config.runtime.device},
                        {"monitor", MonitorJson(config.monitor)}};
  return out.dump(2, ' ', false, Json::error_handler_t::replace);
}

}  // namespace dst::config_phases
