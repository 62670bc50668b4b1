// ds_config phase 2: the gates (see config_phases.h).
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
// Phase 2: gates. Each decides whether this build can run one feature as
// configured; the issue that builds the feature relaxes its gate.

// Every ZeRO stage is built: 0 (data parallelism), 1 (partitioned optimizer
// state), 2 (and gradients), 3 (and parameters). ReadZero has already limited
// the stage to 0-3; the gate stays for stages added later.
Status CheckZeroStageSupported(const ZeroConfig &zero) {
  if (zero.stage <= 3) return Status::Ok();
  return NotSupported("zero_optimization.stage: ZeRO stage " + std::to_string(zero.stage) +
                      " is not supported; this build implements stages 0, 1, 2 and 3");
}

// fp16 and bf16 train with 16-bit parameters, activations and gradients and
// fp32 master weights; gradients are reduced in fp32 or in the training dtype.
// fp32 training reduces in fp32, or rounds its gradients to fp16/bf16 for
// the wire (half the bytes) and sums them back into fp32.
Status CheckCommunicationTypeSupported(DType precision, DType dtype) {
  if (dtype == DType::kFloat32 || dtype == precision || precision == DType::kFloat32)
    return Status::Ok();
  const std::string name = dtype == DType::kFloat16 ? "fp16" : "bf16";
  return NotSupported("communication_data_type: \"" + name + "\" while training in " +
                      (precision == DType::kFloat16 ? "fp16" : "bf16") +
                      " is not supported; reduce in \"fp32\" or in the training dtype");
}

// The pipeline settings this build cannot honour yet.
Status CheckPipelineSupported(const Config &config) {
  const int64_t interval = config.pipeline.activation_checkpoint_interval;
  if (interval > 0 && config.selective_recompute()) {
    return ConfigError(
        "activation_checkpointing.recompute_granularity \"selective\" and "
        "pipeline.activation_checkpoint_interval " +
        std::to_string(interval) +
        " ask for two kinds of recomputation; choose one (\"full\" with the "
        "interval, or selective with the interval 0 or unset)");
  }
  return Status::Ok();
}

Status CheckOptimizerSupported(const ExtraSettings &extra) {
  if (!extra.unsupported_optimizer.empty()) {
    const std::string &name = extra.unsupported_optimizer;
    return NotSupported("optimizer.type: \"" + name +
                        "\" is not supported yet; dstrain implements Adam, AdamW, SGD, Lamb, "
                        "OneBitAdam, ZeroOneAdam and OneBitLamb");
  }
  if (extra.amsgrad) {
    return NotSupported(
        "optimizer.params.amsgrad: AMSGrad is not supported (DeepSpeed's FusedAdam and "
        "DeepSpeedCPUAdam refuse it too); remove the key or set it to false");
  }
  return Status::Ok();
}

Status CheckSchedulerSupported(const ExtraSettings &extra) {
  if (extra.unsupported_scheduler.empty()) return Status::Ok();
  return NotSupported("scheduler.type: \"" + extra.unsupported_scheduler +
                      "\" is not supported yet; dstrain implements WarmupLR, WarmupDecayLR and "
                      "WarmupCosineLR");
}

Status CheckGradientAveragingSupported(const ExtraSettings &extra) {
  if (extra.sparse_gradients) {
    return NotSupported("sparse_gradients: true is not supported; gradients are dense");
  }
  return Status::Ok();
}

Status CheckGradAccumTypeSupported(const ExtraSettings &extra) {
  if (extra.grad_accum_dtype == "fp32") return Status::Ok();
  return NotSupported("data_types.grad_accum_dtype: \"" + extra.grad_accum_dtype +
                      "\" is not supported yet; gradients accumulate in fp32");
}

Status CheckCheckpointOptionsSupported(const ExtraSettings &extra) {
  if (!extra.load_universal) return Status::Ok();
  return NotSupported(
      "checkpoint.load_universal: universal checkpoints are not supported yet; dstrain "
      "checkpoints reshard on load by themselves");
}

Status CheckMonitoringSupported(const ExtraSettings &extra) {
  if (!extra.enabled_monitor.empty()) {
    return NotSupported(extra.enabled_monitor + ".enabled: DeepSpeed's " + extra.enabled_monitor +
                        " is not supported yet; use dstrain.monitor (Prometheus /metrics, "
                        "the web dashboard, a CSV/JSON-lines log) or csv_monitor");
  }
  if (extra.memory_breakdown) {
    return NotSupported(
        "memory_breakdown: true is not supported yet; dstrain reports memory by category "
        "through dstrain.monitor (Prometheus, dashboard, log) and dst_engine_metrics_json");
  }
  return Status::Ok();
}

Status CheckAmpSupported(const ExtraSettings &extra) {
  if (!extra.amp_enabled) return Status::Ok();
  return NotSupported(
      "amp.enabled: NVIDIA apex AMP is not supported; use fp16 or bf16 instead "
      "once they are built");
}

// DeepSpeed's feature sections dstrain has no counterpart for, each with the
// nearest thing it has.
std::string NearestFeature(const std::string &section) {
  if (section == "compression_training")
    return "quantization-aware training and pruning are not built; to compress the "
           "gradients' communication use gradient_compression, or OneBitAdam / ZeroOneAdam";
  if (section == "sparse_attention")
    return "attention is dense and causal (FlashAttention-style on a GPU: no T x T tensor "
           "saved)";
  if (section == "progressive_layer_drop")
    return "every layer runs every step; activation_checkpointing trades compute for memory";
  if (section == "curriculum_learning" || section == "data_efficiency")
    return "batches come in the dataset's shuffled order (dstrain.seed); --seq-len sets the "
           "sequence length";
  if (section == "elasticity")
    return "checkpoints reshard to any dp x tp x pp layout: restart on the new world size "
           "with --load";
  if (section == "hybrid_engine") return "`dstrain generate` samples from a checkpoint";
  if (section == "eigenvalue")
    return "no Hessian eigenvalues; the metrics carry each step's gradient norm";
  if (section == "nebula") return "checkpoints are saved atomically by save_checkpoint / --save";
  return "no counterpart";
}

Status CheckFeatureSectionsSupported(const ExtraSettings &extra) {
  if (extra.enabled_feature.empty()) return Status::Ok();
  return NotSupported(
      extra.enabled_feature + ": this DeepSpeed feature is not supported by dstrain (nearest: " +
      NearestFeature(extra.enabled_feature) + "); remove the section or set \"enabled\": false");
}

}  // namespace

// ZeRO 2 and 3 send each encoded piece to its owner (a sparse
// reduce-scatter) from host memory; on a device the codec would need the
// staged gradients copied down piece by piece.
Status CheckGradientCompressionSupported(const Config &config) {
  if (!config.gradient_compression.enabled || config.zero.stage <= 1 ||
      config.runtime.device != "cuda")
    return Status::Ok();
  return NotSupported(
      "gradient_compression with zero_optimization.stage " + std::to_string(config.zero.stage) +
      " on dstrain.device \"cuda\" is not supported yet: the sparse reduce-scatter encodes "
      "each piece of staged gradients in host memory. Use stage 0 or 1 with "
      "gradient_compression on the device (its buckets are encoded on the host), or "
      "\"compress_communication\": true (16-bit reduction, half the bytes)");
}

// A device trains with every buffer in its memory at any ZeRO stage, in
// fp32, fp16 or bf16, with pipeline and tensor parallelism; the optimizer
// state and master weights stay there too, or on the host with
// offload_optimizer (ZeRO-Offload: cpu, or nvme); the fp32 modules of 16-bit
// training and gradient compression (its codec on the host) too. What still
// runs on host memory only (offload_param) is refused. (The world size a
// CUDA device takes is TrainingDevice::Open's to say: the guarded stand-in
// trains any size.)
Status CheckDeviceSupported(const Config &config) {
  if (config.runtime.device != "cuda") return Status::Ok();
  // The parameter shard in host memory is written by the optimizer's step on
  // the host: ZeRO-Infinity's pairing of the two offloads.
  if (config.zero.offload_param_device != "none" && config.zero.offload_optimizer_device == "none")
    return NotSupported(
        "dstrain.device \"cuda\" with zero_optimization.offload_param but no offload_optimizer "
        "is not supported yet: the parameter shard in host memory (or on NVMe) is written by "
        "the optimizer's step on the host. Add \"offload_optimizer\": {\"device\": \"cpu\"} (or "
        "\"nvme\") as ZeRO-Infinity does, or drop offload_param");
  return Status::Ok();
}

Status CheckMomentumCorrection(const Config &config) {
  const GradientCompressionConfig &gc = config.gradient_compression;
  if (!gc.enabled || !gc.momentum_correction) return Status::Ok();
  const OptimizerConfig &o = config.optimizer;
  if (o.type != OptimizerType::kSGD || o.momentum <= 0.0)
    return ConfigError(
        "gradient_compression.momentum_correction moves SGD's momentum to each rank before "
        "compression (Deep Gradient Compression); it needs optimizer \"SGD\" with momentum > 0. "
        "Set the optimizer to SGD with momentum, or remove momentum_correction (Adam keeps its "
        "own moments: use warmup_steps, or OneBitAdam, which compresses Adam's momentum)");
  if (o.nesterov)
    return NotSupported(
        "gradient_compression.momentum_correction with SGD's nesterov: true is not supported "
        "yet; set nesterov to false");
  if (config.gradient_clipping > 0.0)
    return NotSupported(
        "gradient_clipping with gradient_compression.momentum_correction is not supported yet: "
        "the reduced values are the ranks' velocities, not the gradient, and Deep Gradient "
        "Compression's local clipping (each rank's gradient before its velocity) needs the whole "
        "local gradient before the first bucket leaves. Set gradient_clipping to 0, or remove "
        "momentum_correction");
  const bool once_per_step = config.zero.stage == 2 && config.pp_size > 1;
  if (config.zero.stage >= 2 && config.gradient_accumulation_steps > 1 && !once_per_step)
    return NotSupported(
        "gradient_compression.momentum_correction at zero_optimization.stage " +
        std::to_string(config.zero.stage) + " with gradient_accumulation_steps " +
        std::to_string(config.gradient_accumulation_steps) +
        " is not supported yet: ZeRO 2/3 reduce every micro-batch, and the velocity must "
        "advance once per step. Use gradient_accumulation_steps 1 (a larger micro-batch), or "
        "stage 0 or 1");
  return Status::Ok();
}

// "target": "update" keeps every rank's whole optimizer on its own
// gradients: ZeRO 0 only (which offloads nothing), on the host.
Status CheckUpdateCompression(const Config &config) {
  const GradientCompressionConfig &gc = config.gradient_compression;
  if (!gc.enabled || gc.target != "update") return Status::Ok();
  const std::string what = "gradient_compression.target \"update\"";
  if (config.zero.stage != 0)
    return NotSupported(what + " at zero_optimization.stage " + std::to_string(config.zero.stage) +
                        " is not supported: every rank steps its own optimizer on its own "
                        "gradients and so keeps the whole optimizer state, which ZeRO shards. Use "
                        "stage 0, or target \"gradient\" (any stage)");
  if (gc.momentum_correction)
    return ConfigError(what +
                       " with momentum_correction: the update already carries each "
                       "rank's own momentum. Remove momentum_correction");
  if (config.runtime.device == "cuda")
    return NotSupported(what +
                        " on dstrain.device \"cuda\" is not supported yet: the update "
                        "is encoded on the host. Use target \"gradient\" on the device");
  return Status::Ok();
}

// Lamb's trust ratio needs each tensor's norms before any weight moves: two
// passes over the optimizer state, which the NVMe tier streams once a step;
// and its kernels run on the host.
Status CheckLambSupported(const Config &config) {
  if (config.optimizer.type != OptimizerType::kLamb) return Status::Ok();
  if (config.zero.offload_optimizer_device == "nvme" || config.zero.offload_param_device == "nvme")
    return NotSupported(
        "optimizer \"Lamb\" with NVMe offload is not supported yet: its trust ratio needs two "
        "passes over the optimizer state, which the NVMe tier streams once a step. Use "
        "\"offload_optimizer\": {\"device\": \"cpu\"} (and offload_param cpu or none), or Adam / "
        "AdamW with NVMe");
  if (config.runtime.device == "cuda" && config.zero.offload_optimizer_device != "cpu")
    return NotSupported(
        "optimizer \"Lamb\" on dstrain.device \"cuda\" is not supported yet: its kernels run on "
        "the host. Add \"offload_optimizer\": {\"device\": \"cpu\"} (ZeRO-Offload: the state and "
        "the update on the host), or use Adam / AdamW on the device");
  return Status::Ok();
}

// 1-bit Adam exchanges each rank's whole momentum: DeepSpeed refuses it with
// ZeRO too. Its exchange runs on the host.
Status CheckOneBitAdamSupported(const Config &config) {
  const OptimizerType type = config.optimizer.type;
  if (type != OptimizerType::kOneBitAdam && type != OptimizerType::kZeroOneAdam &&
      type != OptimizerType::kOneBitLamb)
    return Status::Ok();
  const std::string name = type == OptimizerType::kOneBitAdam    ? "OneBitAdam"
                           : type == OptimizerType::kZeroOneAdam ? "ZeroOneAdam"
                                                                 : "OneBitLamb";
  if (config.zero.stage > 0)
    return NotSupported("optimizer \"" + name + "\" with zero_optimization.stage " +
                        std::to_string(config.zero.stage) +
                        ": it exchanges every rank's whole momentum or gradient, which ZeRO shards "
                        "(DeepSpeed refuses the pair too). Use stage 0, or Adam / AdamW with "
                        "ZeRO and gradient_compression (any stage)");
  if (config.gradient_compression.enabled)
    return ConfigError(
        "optimizer \"" + name +
        "\" and gradient_compression both compress the data-parallel exchange: the optimizer "
        "sends its own 1-bit exchanges. Remove gradient_compression (or use Adam / AdamW with it)");
  if (config.runtime.device == "cuda")
    return NotSupported(
        "optimizer \"" + name +
        "\" on dstrain.device \"cuda\" is not supported yet: its compressed exchange runs on "
        "the host. Use Adam / AdamW on the device");
  return Status::Ok();
}

Status CheckSupported(const Config &config, const ExtraSettings &extra) {
  // Offload before stage: offload implies a stage > 0, and naming the offload
  // is the more specific message.
  DST_RETURN_IF_ERROR(CheckZeroStageSupported(config.zero));
  DST_RETURN_IF_ERROR(
      CheckCommunicationTypeSupported(config.precision(), config.communication_data_type));
  DST_RETURN_IF_ERROR(CheckPipelineSupported(config));
  DST_RETURN_IF_ERROR(CheckGradientCompressionSupported(config));
  DST_RETURN_IF_ERROR(CheckOptimizerSupported(extra));
  DST_RETURN_IF_ERROR(CheckLambSupported(config));
  DST_RETURN_IF_ERROR(CheckOneBitAdamSupported(config));
  DST_RETURN_IF_ERROR(CheckSchedulerSupported(extra));
  DST_RETURN_IF_ERROR(CheckGradientAveragingSupported(extra));
  DST_RETURN_IF_ERROR(CheckGradAccumTypeSupported(extra));
  DST_RETURN_IF_ERROR(CheckCheckpointOptionsSupported(extra));
  DST_RETURN_IF_ERROR(CheckMonitoringSupported(extra));
  DST_RETURN_IF_ERROR(CheckAmpSupported(extra));
  return CheckFeatureSectionsSupported(extra);
}

}  // namespace dst::config_phases
