// The key table, the lookups on it, and the unknown-key message with its
// "did you mean" suggestion.
#include "core/config/config_keys.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <string>
#include <vector>

#include "core/config/json_reader.h"

namespace dst {
namespace {

// Sections that only say where a key lives; kept as constants so a typo in the
// table cannot create a new section silently.
constexpr std::string_view kTop = "";
constexpr std::string_view kZero = "zero_optimization";
constexpr std::string_view kOffloadOpt = "zero_optimization.offload_optimizer";
constexpr std::string_view kOffloadParam = "zero_optimization.offload_param";
constexpr std::string_view kFp16 = "fp16";
constexpr std::string_view kBf16 = "bf16";
constexpr std::string_view kBfloat16 = "bfloat16";
constexpr std::string_view kOptimizer = "optimizer";
constexpr std::string_view kAdam = "optimizer.params:Adam";
constexpr std::string_view kAdamW = "optimizer.params:AdamW";
constexpr std::string_view kSgd = "optimizer.params:SGD";
constexpr std::string_view kLamb = "optimizer.params:Lamb";
constexpr std::string_view kOneBitAdam = "optimizer.params:OneBitAdam";
constexpr std::string_view kZeroOneAdam = "optimizer.params:ZeroOneAdam";
constexpr std::string_view kOneBitLamb = "optimizer.params:OneBitLamb";
constexpr std::string_view kScheduler = "scheduler";
constexpr std::string_view kWarmupLR = "scheduler.params:WarmupLR";
constexpr std::string_view kWarmupDecayLR = "scheduler.params:WarmupDecayLR";
constexpr std::string_view kWarmupCosineLR = "scheduler.params:WarmupCosineLR";
constexpr std::string_view kActCkpt = "activation_checkpointing";
constexpr std::string_view kTensorParallel = "tensor_parallel";
constexpr std::string_view kPipelineParallel = "pipeline_parallel";
constexpr std::string_view kPipeline = "pipeline";
constexpr std::string_view kDataTypes = "data_types";
constexpr std::string_view kCheckpoint = "checkpoint";
constexpr std::string_view kFlops = "flops_profiler";
constexpr std::string_view kAutotuning = "autotuning";
constexpr std::string_view kArgMappings = "autotuning.arg_mappings";
constexpr std::string_view kModelInfo = "autotuning.model_info";
constexpr std::string_view kTensorboard = "tensorboard";
constexpr std::string_view kCsv = "csv_monitor";
constexpr std::string_view kWandb = "wandb";
constexpr std::string_view kCommsLogger = "comms_logger";
constexpr std::string_view kAmp = "amp";
constexpr std::string_view kAio = "aio";
constexpr std::string_view kGradCompression = "gradient_compression";
constexpr std::string_view kCommunication = "communication";
constexpr std::string_view kDstrain = "dstrain";
constexpr std::string_view kMonitor = "dstrain.monitor";
constexpr std::string_view kTrace = "dstrain.trace";
constexpr std::string_view kMonitorHttp = "dstrain.monitor.http";
constexpr std::string_view kMonitorLog = "dstrain.monitor.log";

// Phrases shared by many rows.
constexpr std::string_view kBool = "true or false";
constexpr std::string_view kObject = "an object";
constexpr std::string_view kBatch = "a positive integer, \"auto\" or null";
constexpr std::string_view kBucket = "an integer >= 0 or \"auto\" (= the default)";
constexpr std::string_view kCount = "an integer >= 0";
constexpr std::string_view kPositive = "a positive integer";
constexpr std::string_view kLr = "a number >= 0 or \"auto\" (= 0.001)";
constexpr std::string_view kWeightDecay = "a number >= 0 or \"auto\" (= 0)";
constexpr std::string_view kBetas =
    "[beta1, beta2] with each in [0, 1), or \"auto\" (= [0.9, 0.999])";
constexpr std::string_view kEps = "a number > 0 or \"auto\" (= 1e-8)";
constexpr std::string_view kDevice = "\"none\", \"cpu\" or \"nvme\"";
constexpr std::string_view kPathOrNull = "a path string or null";
constexpr std::string_view kString = "a string";
constexpr std::string_view kWarmupType = "\"log\" or \"linear\"";
constexpr std::string_view kWarmupMin = "a number >= 0 or \"auto\" (= 0)";
constexpr std::string_view kWarmupMax = "a number >= 0 or \"auto\" (= optimizer lr)";
constexpr std::string_view kWarmupSteps = "an integer >= 0 or \"auto\" (= 0)";
constexpr std::string_view kTotalSteps =
    "an integer > warmup_num_steps or \"auto\" (= the run's step count)";
constexpr std::string_view kLastBatch = "-1 (resuming takes the position from the checkpoint)";
constexpr std::string_view kRatio = "a number in [0, 1]";
constexpr std::string_view kMonitorEnabled = "true or false (true is not supported yet)";
constexpr std::string_view kNoEffect = "accepted; no effect in dstrain";
constexpr std::string_view kNotBuiltIfTrue = "true is not supported yet";
constexpr std::string_view kFeature = "an object with \"enabled\": false";
constexpr std::string_view kFeatureDoc =
    "DeepSpeed feature dstrain does not implement; accepted only when disabled";

constexpr auto kKeys = std::to_array<ConfigKeyInfo>({
    // ---- top level: batch ----
    {kTop, "train_batch_size", kBatch,
     "samples per optimizer step over all data-parallel ranks; "
     "= micro batch * accumulation steps * data-parallel size"},
    {kTop, "train_micro_batch_size_per_gpu", kBatch, "samples per forward/backward on one rank"},
    {kTop, "gradient_accumulation_steps", kBatch, "micro-batches accumulated per optimizer step"},
    // ---- top level: sections ----
    {kTop, "zero_optimization", kObject, "ZeRO stages 0-3, offload"},
    {kTop, "optimizer", "an object {\"type\": ..., \"params\": {...}}",
     "optimizer; absent = AdamW (lr 0.001, betas [0.9, 0.999], eps 1e-8, weight_decay 0)"},
    {kTop, "scheduler", "an object {\"type\": ..., \"params\": {...}}",
     "learning-rate schedule; absent = constant lr"},
    {kTop, "fp16", kObject, "fp16 mixed precision with loss scaling"},
    {kTop, "bf16", kObject, "bf16 mixed precision"},
    {kTop, "bfloat16", kObject, "DeepSpeed's alias of bf16"},
    {kTop, "activation_checkpointing", kObject, "activation checkpointing options"},
    {kTop, "tensor_parallel", kObject, "tensor (and sequence) parallelism"},
    {kTop, "pipeline_parallel", kObject, "pipeline parallelism, tutorial spelling"},
    {kTop, "pipeline", kObject, "DeepSpeed PipelineEngine options"},
    {kTop, "data_types", kObject, "dtype options"},
    {kTop, "checkpoint", kObject, "checkpoint options"},
    {kTop, "dstrain", kObject, "dstrain's own settings (not DeepSpeed keys)"},
    // ---- top level: scalars ----
    {kTop, "gradient_clipping", "a number >= 0 or \"auto\" (= 1.0)",
     "clip the global gradient norm to this value; 0 = off"},
    {kTop, "compress_communication", kBool,
     "reduce gradients in 16 bits (bf16 under fp32 training, else the training dtype)"},
    {kTop, "communication_data_type", "\"fp32\", \"fp16\", \"bf16\" or null",
     "dtype of gradient communication; only fp32 is supported yet"},
    {kTop, "steps_per_print", kPositive, "print progress every this many steps"},
    {kTop, "wall_clock_breakdown", kBool, "time forward/backward/step separately"},
    {kTop, "prescale_gradients", kBool, "divide the gradients by the dp size before the reduction"},
    {kTop, "gradient_predivide_factor", "a number > 0",
     "without prescale_gradients: divide by it before the reduction, multiply by it / dp after"},
    {kTop, "sparse_gradients", kBool, "true is not supported"},
    {kTop, "zero_allow_untested_optimizer", kBool, kNoEffect},
    {kTop, "zero_force_ds_cpu_optimizer", kBool, kNoEffect},
    {kTop, "dump_state", kBool, "accepted; dstrain reports its resolved config instead"},
    {kTop, "memory_breakdown", kBool, "true is not supported yet; use dstrain.monitor"},
    {kTop, "flops_profiler", kObject, "DeepSpeed's flops profiler: one step's per-layer FLOPs"},
    {kTop, "tensorboard", kObject, "DeepSpeed monitor; enabled: true not supported yet"},
    {kTop, "csv_monitor", kObject, "DeepSpeed's CSV monitor: dstrain's metrics log in CSV"},
    {kTop, "wandb", kObject, "DeepSpeed monitor; enabled: true not supported yet"},
    {kTop, "comms_logger", kObject, "DeepSpeed comms logger; enabled: true not supported yet"},
    {kTop, "amp", kObject, "NVIDIA apex AMP; enabled: true is not supported"},
    {kTop, "aio", kObject, "async I/O of the NVMe offload tier"},
    {kTop, "autotuning", kObject,
     "DeepSpeed's autotuner: read by `dstrain autotune`; a trial's metric file"},
    // DeepSpeed features with no dstrain counterpart: recognised so that a
    // pasted config gets "not supported" rather than "unknown key".
    {kTop, "elasticity", kFeature, kFeatureDoc},
    {kTop, "compression_training", kFeature, kFeatureDoc},
    {kTop, "curriculum_learning", kFeature, kFeatureDoc},
    {kTop, "data_efficiency", kFeature, kFeatureDoc},
    {kTop, "progressive_layer_drop", kFeature, kFeatureDoc},
    {kTop, "eigenvalue", kFeature, kFeatureDoc},
    {kTop, "sparse_attention", kFeature, kFeatureDoc},
    {kTop, "hybrid_engine", kFeature, kFeatureDoc},
    {kTop, "nebula", kFeature, kFeatureDoc},
    {kTop, "gradient_compression", kObject,
     "top-k / 1-bit / 2-bit gradient compression with error feedback (ZeRO 0-3)"},
    {kTop, "communication", kObject, "collective topology and straggler detection"},

    // ---- zero_optimization ----
    {kZero, "stage", "0, 1, 2 or 3",
     "ZeRO stage: 0 data parallelism, 1 + optimizer state, 2 + gradients, 3 + parameters "
     "partitioned"},
    {kZero, "overlap_comm", kBool, "overlap gradient reduction with backward"},
    {kZero, "contiguous_gradients", kBool, "copy gradients into one contiguous buffer"},
    {kZero, "reduce_bucket_size", kBucket, "elements per gradient-reduction bucket (5e8)"},
    {kZero, "allgather_bucket_size", kBucket, "elements per all-gather bucket (5e8)"},
    {kZero, "reduce_scatter", kBool, "ZeRO 1/2: reduce-scatter instead of all-reduce"},
    {kZero, "allgather_partitions", kBool, "ZeRO 1/2: all-gather instead of broadcasts"},
    {kZero, "round_robin_gradients", kBool, "ZeRO 1/2: round-robin gradient partitioning"},
    {kZero, "stage3_prefetch_bucket_size", kBucket, "ZeRO 3: parameter prefetch size (5e7)"},
    {kZero, "zero_allowed_param_types", "a list of layer types",
     "stage 3: only tensors of these types are partitioned (Linear, Embedding, LayerNorm, "
     "Attention, CrossAttention)"},
    {kZero, "zero_force_param_types", "a list of layer types",
     "stage 3: tensors of these types stay whole on every rank"},
    {kZero, "stage3_param_persistence_threshold", kBucket,
     "ZeRO 3: parameters smaller than this stay whole (1e5)"},
    {kZero, "stage3_max_live_parameters", kCount, "ZeRO 3: gathered parameters kept (1e9)"},
    {kZero, "stage3_max_reuse_distance", kCount, "ZeRO 3: reuse distance to keep (1e9)"},
    {kZero, "stage3_gather_16bit_weights_on_model_save", kBool,
     "ZeRO 3: gather full weights when saving the model"},
    {kZero, "stage3_gather_fp16_weights_on_model_save", kBool,
     "deprecated DeepSpeed spelling of stage3_gather_16bit_weights_on_model_save"},
    {kZero, "sub_group_size", kPositive,
     "elements the optimizer steps at a time (1e9); the NVMe tier's piece"},
    {kZero, "offload_optimizer", kObject, "optimizer-state offload (cpu: in place; nvme)"},
    {kZero, "offload_param", kObject, "parameter offload, ZeRO 3 (cpu: in place; nvme: swap file)"},

    {kOffloadOpt, "device", kDevice,
     "nvme: master weights and optimizer state in a swap file per rank (ZeRO 1-3); cpu: "
     "already in host memory on this engine"},
    {kOffloadOpt, "pin_memory", kBool,
     "on a device: page-locked transfer buffers (the copies run beside CPU-Adam)"},
    {kOffloadOpt, "nvme_path", kPathOrNull, "directory for NVMe swap files"},
    {kOffloadOpt, "buffer_count", "an integer in [2, 1024]", "sub-group buffers in memory (4)"},
    {kOffloadOpt, "pipeline_read", kBool, "read the next sub-group while one is updated"},
    {kOffloadOpt, "pipeline_write", kBool, "write the last sub-group while one is updated"},
    {kOffloadOpt, "fast_init", kBool, "fast optimizer initialisation for NVMe"},
    {kOffloadOpt, "ratio", kRatio, "fraction of optimizer state offloaded (1.0; nvme: only 1.0)"},
    {kOffloadParam, "device", kDevice, "cpu: already in host memory; nvme: swap file (ZeRO 3)"},
    {kOffloadParam, "pin_memory", kBool, "page-locked host buffers"},
    {kOffloadParam, "nvme_path", kPathOrNull, "directory for NVMe swap files"},
    {kOffloadParam, "buffer_count", kCount, "windows a layer's share is read ahead into (5)"},
    {kOffloadParam, "buffer_size", kCount, "largest share of one layer per window, elements (1e8)"},
    {kOffloadParam, "max_in_cpu", kCount, "shard elements kept in memory, the rest swapped (1e9)"},

    // ---- precision ----
    {kFp16, "enabled", "true, false or \"auto\" (= false)",
     "fp16 parameters, activations, gradients; fp32 master weights; loss scaling"},
    {kFp16, "auto_cast", kBool, "cast inputs to fp16"},
    {kFp16, "loss_scale", "a number >= 0", "static loss scale; 0 = dynamic"},
    {kFp16, "initial_scale_power", "an integer in [0, 64]", "dynamic scale starts at 2^this"},
    {kFp16, "loss_scale_window", kPositive, "steps without overflow before the scale grows"},
    {kFp16, "hysteresis", kPositive, "overflows tolerated before the scale shrinks"},
    {kFp16, "consecutive_hysteresis", kBool, "refill hysteresis after a good step"},
    {kFp16, "min_loss_scale", "a number > 0", "lower bound of the dynamic scale"},
    {kFp16, "fp16_override_modules", "a list of layer types",
     "layer types whose parameters, gradients and activations stay fp32"},
    {kBf16, "enabled", "true, false or \"auto\" (= false)",
     "bf16 parameters, activations, gradients; fp32 master weights"},
    {kBf16, "bf16_override_modules", "a list of layer types",
     "layer types whose parameters, gradients and activations stay fp32"},
    {kBfloat16, "enabled", "true, false or \"auto\" (= false)", "DeepSpeed's alias of bf16"},
    {kBfloat16, "bf16_override_modules", "a list of layer types",
     "layer types whose parameters, gradients and activations stay fp32"},

    // ---- optimizer ----
    {kOptimizer, "type",
     "one of Adam, AdamW, SGD, Lamb, OneBitAdam, ZeroOneAdam, OneBitLamb (any case)",
     "the optimizer"},
    {kOptimizer, "params", kObject, "the optimizer's parameters"},
    {kAdam, "lr", kLr, "learning rate"},
    {kAdam, "betas", kBetas, "moment decay rates"},
    {kAdam, "eps", kEps, "denominator epsilon"},
    {kAdam, "weight_decay", kWeightDecay, "weight decay"},
    {kAdam, "adam_w_mode", kBool,
     "true (DeepSpeed's default) = decoupled weight decay as AdamW; false = L2 in the gradient"},
    {kAdam, "torch_adam", kBool, kNoEffect},
    {kAdam, "bias_correction", kBool,
     "true: moments divided by (1 - beta^t); false: raw (FusedAdam's)"},
    {kAdam, "amsgrad", kBool, "true is refused, as DeepSpeed's FusedAdam and CPU-Adam refuse it"},
    {kAdamW, "lr", kLr, "learning rate"},
    {kAdamW, "betas", kBetas, "moment decay rates"},
    {kAdamW, "eps", kEps, "denominator epsilon"},
    {kAdamW, "weight_decay", kWeightDecay, "decoupled weight decay"},
    {kAdamW, "adam_w_mode", "true (AdamW always decouples weight decay)", "must be true"},
    {kAdamW, "torch_adam", kBool, kNoEffect},
    {kAdamW, "bias_correction", kBool,
     "true: moments divided by (1 - beta^t); false: raw (FusedAdam's)"},
    {kAdamW, "amsgrad", kBool, "true is refused, as DeepSpeed's FusedAdam and CPU-Adam refuse it"},
    {kLamb, "lr", kLr, "learning rate"},
    {kLamb, "betas", kBetas, "moment decay rates"},
    {kLamb, "eps", kEps, "denominator epsilon"},
    {kLamb, "weight_decay", kWeightDecay, "added to the update, inside the trust ratio"},
    {kLamb, "bias_correction", kBool, "true: step size lr sqrt(1 - beta2^t) / (1 - beta1^t)"},
    {kLamb, "eps_inside_sqrt", kBool, "true: sqrt(v + eps); false: sqrt(v) + eps"},
    {kLamb, "max_coeff", "a number > 0", "upper clamp of the trust ratio (10.0)"},
    {kLamb, "min_coeff", "a number >= 0", "lower clamp of the trust ratio (0.01)"},
    {kLamb, "max_grad_norm", "0 (use gradient_clipping)", "refused when > 0"},
    {kLamb, "amsgrad", kBool, "true is refused, as DeepSpeed's FusedLamb refuses it"},
    {kOneBitAdam, "lr", kLr, "learning rate"},
    {kOneBitAdam, "betas", kBetas, "moment decay rates"},
    {kOneBitAdam, "eps", kEps, "denominator epsilon (outside the root)"},
    {kOneBitAdam, "weight_decay", kWeightDecay, "decoupled weight decay"},
    {kOneBitAdam, "freeze_step", "an integer >= 0",
     "plain Adam steps before the compressed momentum exchange (100000)"},
    {kOneBitAdam, "bias_correction", kBool, "no effect: DeepSpeed's OnebitAdam has none either"},
    {kOneBitAdam, "eps_inside_sqrt", kBool, "no effect: DeepSpeed's OnebitAdam ignores it too"},
    {kOneBitAdam, "cuda_aware", kBool, "no effect: the data-parallel group carries the exchange"},
    {kOneBitAdam, "comm_backend_name", "a string",
     "no effect: the data-parallel group carries the exchange"},
    {kOneBitAdam, "max_grad_norm", "0 (use gradient_clipping)", "refused when > 0"},
    {kOneBitAdam, "amsgrad", kBool, "true is refused, as DeepSpeed's OnebitAdam refuses it"},
    {kZeroOneAdam, "lr", kLr, "learning rate"},
    {kZeroOneAdam, "betas", kBetas, "moment decay rates"},
    {kZeroOneAdam, "eps", kEps, "denominator epsilon (outside the root)"},
    {kZeroOneAdam, "weight_decay", kWeightDecay, "decoupled weight decay"},
    {kZeroOneAdam, "var_freeze_step", "an integer >= 0",
     "the last step that updates the variance (100000)"},
    {kZeroOneAdam, "var_update_scaler", "an integer >= 1",
     "variance steps between doublings of their interval (16)"},
    {kZeroOneAdam, "local_step_scaler", "an integer >= 1",
     "local steps between doublings of the synchronisation interval (32678)"},
    {kZeroOneAdam, "local_step_clipper", "an integer >= 1",
     "the largest synchronisation interval (16)"},
    {kZeroOneAdam, "bias_correction", kBool, "no effect: DeepSpeed's ZeroOneAdam has none either"},
    {kZeroOneAdam, "eps_inside_sqrt", kBool, "no effect: DeepSpeed's ZeroOneAdam ignores it too"},
    {kZeroOneAdam, "cuda_aware", kBool, "no effect: the data-parallel group carries the exchange"},
    {kZeroOneAdam, "comm_backend_name", "a string",
     "no effect: the data-parallel group carries the exchange"},
    {kZeroOneAdam, "max_grad_norm", "0 (use gradient_clipping)", "refused when > 0"},
    {kZeroOneAdam, "amsgrad", kBool, "true is refused, as DeepSpeed's ZeroOneAdam refuses it"},
    {kOneBitLamb, "lr", kLr, "learning rate"},
    {kOneBitLamb, "betas", kBetas, "moment decay rates"},
    {kOneBitLamb, "eps", kEps, "denominator epsilon (outside the root)"},
    {kOneBitLamb, "weight_decay", kWeightDecay, "added to the update, inside the trust ratio"},
    {kOneBitLamb, "freeze_step", "an integer >= 0",
     "Lamb steps before the compressed momentum exchange (100000)"},
    {kOneBitLamb, "max_coeff", "a number > 0", "upper clamp of the trust ratio (10.0)"},
    {kOneBitLamb, "min_coeff", "a number >= 0", "lower clamp of the trust ratio (0.01)"},
    {kOneBitLamb, "coeff_beta", "a number in [0, 1)",
     "the warm-up's running average of each tensor's trust ratio (0.9)"},
    {kOneBitLamb, "factor_max", "a number > 0", "upper bound of the frozen ratio's factor (4.0)"},
    {kOneBitLamb, "factor_min", "a number > 0", "lower bound of the frozen ratio's factor (0.5)"},
    {kOneBitLamb, "factor_threshold", "a number >= 0",
     "the factor's largest relative change per step (0.1)"},
    {kOneBitLamb, "bias_correction", kBool, "no effect: DeepSpeed's OnebitLamb has none either"},
    {kOneBitLamb, "eps_inside_sqrt", kBool, "no effect: DeepSpeed's OnebitLamb ignores it too"},
    {kOneBitLamb, "cuda_aware", kBool, "no effect: the data-parallel group carries the exchange"},
    {kOneBitLamb, "comm_backend_name", "a string",
     "no effect: the data-parallel group carries the exchange"},
    {kOneBitLamb, "max_grad_norm", "0 (use gradient_clipping)", "refused when > 0"},
    {kOneBitLamb, "amsgrad", kBool, "true is refused, as DeepSpeed's OnebitLamb refuses it"},
    {kSgd, "lr", kLr, "learning rate"},
    {kSgd, "momentum", "a number >= 0", "momentum factor (0)"},
    {kSgd, "dampening", "a number >= 0", "momentum dampening (0)"},
    {kSgd, "weight_decay", kWeightDecay, "L2 penalty"},
    {kSgd, "nesterov", kBool, "Nesterov momentum; needs momentum > 0 and dampening 0"},

    // ---- scheduler ----
    {kScheduler, "type", "one of WarmupLR, WarmupDecayLR, WarmupCosineLR", "the schedule"},
    {kScheduler, "params", kObject, "the schedule's parameters"},
    {kWarmupLR, "warmup_min_lr", kWarmupMin, "lr at step 0 (0)"},
    {kWarmupLR, "warmup_max_lr", kWarmupMax, "lr after warm-up (0.001)"},
    {kWarmupLR, "warmup_num_steps", kWarmupSteps, "warm-up steps (1000)"},
    {kWarmupLR, "warmup_type", kWarmupType, "warm-up curve (log)"},
    {kWarmupLR, "last_batch_iteration", kLastBatch, "must be -1"},
    {kWarmupDecayLR, "warmup_min_lr", kWarmupMin, "lr at step 0 (0)"},
    {kWarmupDecayLR, "warmup_max_lr", kWarmupMax, "lr after warm-up (0.001)"},
    {kWarmupDecayLR, "warmup_num_steps", kWarmupSteps, "warm-up steps (1000)"},
    {kWarmupDecayLR, "warmup_type", kWarmupType, "warm-up curve (log)"},
    {kWarmupDecayLR, "total_num_steps", kTotalSteps, "step at which the lr reaches 0 (required)"},
    {kWarmupDecayLR, "last_batch_iteration", kLastBatch, "must be -1"},
    {kWarmupCosineLR, "total_num_steps", kTotalSteps, "length of the schedule (required)"},
    {kWarmupCosineLR, "warmup_min_ratio", kRatio, "lr ratio at step 0 (0)"},
    {kWarmupCosineLR, "warmup_num_steps", kWarmupSteps, "warm-up steps (1000)"},
    {kWarmupCosineLR, "cos_min_ratio", kRatio, "final lr ratio (0.0001)"},
    {kWarmupCosineLR, "warmup_type", kWarmupType, "warm-up curve (log)"},
    {kWarmupCosineLR, "last_batch_iteration", kLastBatch, "must be -1"},

    // ---- activation checkpointing ----
    {kActCkpt, "partition_activations", kBool,
     "shard kept inputs over tensor-parallel ranks (nothing to shard at tp 1)"},
    {kActCkpt, "cpu_checkpointing", kBool, "kept inputs in host memory (where they live on CPU)"},
    {kActCkpt, "contiguous_memory_optimization", kBool, "needs partition_activations"},
    {kActCkpt, "number_checkpoints", "an integer >= 0 or null", "checkpoints per step; 0 = unset"},
    {kActCkpt, "synchronize_checkpoint_boundary", kBool, "synchronise at checkpoint boundaries"},
    {kActCkpt, "profile", kBool, "time the checkpointed forward/backward"},
    {kActCkpt, "recompute_granularity", "\"full\" or \"selective\"",
     "ours (Megatron's): full = recompute whole blocks, selective = only the attention core"},

    // ---- model parallelism ----
    {kTensorParallel, "autotp_size", "an integer >= 0 (0 or 1 = off)",
     "DeepSpeed AutoTP degree; > 1 is not supported yet"},
    {kTensorParallel, "enabled", kBool, "tutorial spelling: turn tensor parallelism on"},
    {kTensorParallel, "tp_size", kPositive, "tutorial spelling of the degree"},
    {kTensorParallel, "sequence_parallel", kBool,
     "Megatron's sequence parallelism: token rows split over tp outside the tp regions"},
    {kPipelineParallel, "enabled", kBool, "turn pipeline parallelism on"},
    {kPipelineParallel, "pp_size", kPositive, "pipeline stages (divides the world size)"},
    {kPipelineParallel, "micro_batches", kPositive,
     "micro-batches per step; the same as gradient_accumulation_steps"},
    {kPipeline, "stages", "a positive integer or \"auto\" (= 1)", "pipeline stages"},
    {kPipeline, "partition", kString,
     "layer partition method (parameters, uniform, type:..., cost)"},
    {kPipeline, "partition_method", kString, "the same as partition (PipelineModule's name)"},
    {kPipeline, "schedule", "\"1f1b\", \"gpipe\", \"interleaved\" or \"zb-h1\"",
     "pipeline schedule (1f1b)"},
    {kPipeline, "virtual_stages", kPositive, "model chunks per rank (interleaved; 1)"},
    {kPipeline, "seed_layers", kBool, "seed each layer differently"},
    {kPipeline, "activation_checkpoint_interval", kCount,
     "layers between activation checkpoints (0 off, 1 every layer)"},
    {kPipeline, "pipe_partitioned", kBool, "partition activations sent between stages"},
    {kPipeline, "grad_partitioned", kBool, "partition gradients sent between stages"},

    // ---- data types, checkpoint ----
    {kDataTypes, "grad_accum_dtype", "\"fp32\", \"fp16\", \"bf16\" or null",
     "gradient accumulation dtype; only fp32 is supported yet"},
    {kCheckpoint, "tag_validation", "\"Ignore\", \"Warn\" or \"Fail\"",
     "check that all ranks save the same tag"},
    {kCheckpoint, "load_universal", kBool, "true (universal checkpoints) is not supported yet"},
    {kCheckpoint, "use_node_local_storage", kBool, "checkpoint to node-local storage"},

    // ---- monitors and profilers ----
    {kAutotuning, "enabled", kBool,
     "with metric_path: rank 0 writes the profiled steps' metric there (a trial)"},
    {kAutotuning, "fast", kBool, "tune ZeRO stage x micro-batch only (true); false: also layouts"},
    {kAutotuning, "results_dir", kPathOrNull, "the table and the best config (autotuning_results)"},
    {kAutotuning, "exps_dir", kPathOrNull, "one directory per trial (autotuning_exps)"},
    {kAutotuning, "overwrite", kBool, "rerun trials whose results exist (true)"},
    {kAutotuning, "start_profile_step", kCount, "first step a trial measures (3)"},
    {kAutotuning, "end_profile_step", kCount, "last step a trial measures (5)"},
    {kAutotuning, "metric", "\"throughput\", \"latency\" or \"flops\"",
     "what the tuner maximises (throughput; latency is minimised)"},
    {kAutotuning, "metric_path", kPathOrNull, "where a trial writes its metric (set by the tuner)"},
    {kAutotuning, "arg_mappings", kObject, "config key -> the program's argument carrying it"},
    {kAutotuning, "model_info", kObject, "accepted; dstrain counts the model itself"},
    {kAutotuning, "model_info_path", kPathOrNull, "accepted; dstrain counts the model itself"},
    {kAutotuning, "mp_size", kPositive, "accepted; the config's tp x pp is the model parallelism"},
    {kAutotuning, "max_train_batch_size", "a positive integer or null",
     "largest train_batch_size tried"},
    {kAutotuning, "min_train_batch_size", kPositive, "smallest train_batch_size tried (1)"},
    {kAutotuning, "max_train_micro_batch_size_per_gpu", kPositive,
     "largest micro-batch tried (1024; memory bounds it first)"},
    {kAutotuning, "min_train_micro_batch_size_per_gpu", kPositive, "smallest micro-batch (1)"},
    {kAutotuning, "num_tuning_micro_batch_sizes", kPositive, "micro-batches tried per stage (3)"},
    {kAutotuning, "tuner_type", "\"gridsearch\", \"random\" or \"model_based\"",
     "the order trials run in (gridsearch)"},
    {kAutotuning, "tuner_early_stopping", kPositive,
     "stop after this many trials without a better one (5)"},
    {kAutotuning, "tuner_num_trials", kPositive, "at most this many trials (50)"},
    {kArgMappings, "*", kString, "the argument, e.g. \"--per_device_train_batch_size\""},
    {kModelInfo, "*", "any", "accepted; dstrain counts the model itself"},
    {kFlops, "enabled", kBool, "profile one step: per-layer FLOPs, latency and FLOP/s"},
    {kFlops, "recompute_fwd_factor", "a number >= 0",
     "accepted; dstrain times recomputation itself"},
    {kFlops, "profile_step", kCount, "the global step (0-based) profiled (1)"},
    {kFlops, "module_depth", "an integer (-1 = all)", "0: totals only; else every layer"},
    {kFlops, "top_modules", kCount, "the slowest layers listed after the table (1)"},
    {kFlops, "detailed", kBool, "print the per-layer table (true)"},
    {kFlops, "output_file", kPathOrNull, "write the profile there instead of the log"},
    {kTensorboard, "enabled", kMonitorEnabled, kNotBuiltIfTrue},
    {kTensorboard, "output_path", kString, kNoEffect},
    {kTensorboard, "job_name", kString, kNoEffect},
    {kCsv, "enabled", kBool, "write the metrics log as CSV (dstrain.monitor.log)"},
    {kCsv, "output_path", kString, "directory of the metrics log"},
    {kCsv, "job_name", kString, "job label of the metrics (a subdirectory of output_path)"},
    {kWandb, "enabled", kMonitorEnabled, kNotBuiltIfTrue},
    {kWandb, "group", "a string or null", kNoEffect},
    {kWandb, "team", "a string or null", kNoEffect},
    {kWandb, "project", kString, kNoEffect},
    {kCommsLogger, "enabled", kMonitorEnabled, kNotBuiltIfTrue},
    {kCommsLogger, "verbose", kBool, kNoEffect},
    {kCommsLogger, "prof_all", kBool, kNoEffect},
    {kCommsLogger, "debug", kBool, kNoEffect},
    {kCommsLogger, "prof_ops", "a list of strings", kNoEffect},
    {kAmp, "enabled", kBool, "true is not supported"},
    {kAmp, "*", "any value", "apex options; only read when enabled"},
    {kCommunication, "enabled", kBool, "true when the section is present"},
    {kCommunication, "topology", "\"tree\", \"ring\", \"hierarchical\" or 3",
     "collective shape of the sums: tree (halving-doubling), ring, 3 (per-axis groups), "
     "hierarchical (node, leaders, node)"},
    {kCommunication, "slow_node_tolerance", "a number >= 0",
     "name ranks slower than the median compute time by more than this (0.1 = 10%)"},
    {kGradCompression, "enabled", kBool, "true when the section is present"},
    {kGradCompression, "algorithm", "\"topk\", \"1bit\" or \"2bit\"",
     "top-k sparsification, sign with a per-chunk scale, or four levels per chunk"},
    {kGradCompression, "topk_ratio", "a number in (0, 1]",
     "share of each gradient bucket top-k sends (0.01)"},
    {kGradCompression, "huffman_coding", kBool, "entropy-code top-k's indices (delta + Huffman)"},
    {kGradCompression, "warmup_steps", "an integer >= 0",
     "the first steps reduce uncompressed (Deep Gradient Compression's warm-up); default 0"},
    {kGradCompression, "momentum_correction", kBool,
     "SGD's momentum accumulated per rank before compression, with momentum factor masking "
     "(Deep Gradient Compression); default false"},
    {kGradCompression, "chunk_size", "an integer in [1, 2^30]",
     "1bit / 2bit: elements per scale (2048); smaller chunks follow the values closer at 4 "
     "bytes a chunk"},
    {kGradCompression, "target", "\"gradient\" or \"update\"",
     "what travels compressed: the gradient reduction, or (ZeRO 0) each rank's own optimizer "
     "step (Efficient-Adam); default \"gradient\""},
    {kAio, "block_size", "an integer >= 4096", "bytes per I/O request (1 MiB)"},
    {kAio, "queue_depth", "an integer in [1, 4096]", "requests in flight per file (8)"},
    {kAio, "intra_op_parallelism", "an integer in [1, 1024]",
     "accepted; one io_uring per file submits every request"},
    {kAio, "thread_count", "an integer in [1, 1024]",
     "DeepSpeed's old name of intra_op_parallelism"},
    {kAio, "single_submit", kBool, "accepted; requests are submitted in batches"},
    {kAio, "overlap_events", kBool, "accepted; completions are reaped as they arrive"},
    {kAio, "use_gds", kBool, "GPUDirect Storage: true is not supported (no GPU path)"},

    // ---- dstrain ----
    {kDstrain, "num_threads", "an integer >= 0",
     "compute threads; 0 = DSTRAIN_NUM_THREADS, else OMP_NUM_THREADS, else all cores"},
    {kDstrain, "seed", "an integer in [0, 2^64)", "seed of data order and runtime randomness"},
    {kDstrain, "unknown_keys", "\"error\" or \"warn\"",
     "unknown top-level keys: an error (default) or a warning naming each"},
    {kDstrain, "device", "\"cpu\" or \"cuda\"",
     "where the rank trains (\"cpu\"); cuda: the GPU LOCAL_RANK names (ZeRO 0-3, dp/tp/pp, "
     "offload_optimizer)"},
    {kDstrain, "comm_timeout_seconds", "a number > 0",
     "every collective and rendezvous gives up after this many seconds (default 300)"},
    {kDstrain, "resume_from_swap", kBool,
     "continue from the optimizer swap files a killed run left (their last common commit)"},
    {kDstrain, "monitor", kObject, "per-rank metrics: Prometheus /metrics, dashboard, log"},
    {kDstrain, "trace", kObject, "Chrome-trace timelines of chosen steps, one file per rank"},
    {kTrace, "enabled", kBool, "write the trace"},
    {kTrace, "steps", "a list of integers >= 0, or a count",
     "global steps (0-based) to trace; a count N: steps 1..N ([1, 2])"},
    {kTrace, "path", kString, "directory of dstrain_trace_rank<R>.json (\"dstrain_trace\")"},
    {kDstrain, "notes", "a list of strings",
     "what the resolved config says about the settings (ignored when read)"},
    {kMonitor, "enabled", kBool, "keep the per-rank metrics registry (implied by http or log)"},
    {kMonitor, "job", "a string of [A-Za-z0-9_.-]", "the job label on every series"},
    {kMonitor, "history_steps", kPositive, "steps kept for /api/v1/history (default 1000)"},
    {kMonitor, "peak_flops_per_second", "a number >= 0",
     "one rank's peak FLOP/s, for MFU (0 = unknown; e.g. the SGEMM peak from bench/)"},
    {kMonitor, "http", kObject, "the HTTP server: /metrics, /api/v1/*, the dashboard"},
    {kMonitorHttp, "enabled", kBool, "serve metrics over HTTP"},
    {kMonitorHttp, "host", "an IP address", "address to bind (default 127.0.0.1)"},
    {kMonitorHttp, "port", "an integer in [0, 65535]",
     "base port; each rank listens on port + local rank (0 = any free port)"},
    {kMonitorHttp, "token", "a string", "bearer token required by every request (empty = none)"},
    {kMonitor, "log", kObject, "a CSV or JSON-lines log of the same series"},
    {kMonitorLog, "enabled", kBool, "write the log"},
    {kMonitorLog, "path", kString, "directory; one file per rank"},
    {kMonitorLog, "format", "\"csv\" or \"jsonl\"", "file format"},
});

std::string Lowercase(std::string_view text) {
  std::string out(text);
  for (char &c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Optimal-string-alignment distance (Levenshtein plus adjacent transposition,
// the usual typo model), on lowercased text.
size_t EditDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

// How far a mistyped key is from a known one. Truncations and fragments are
// common ("train_micro_batch_size" for "train_micro_batch_size_per_gpu"), and
// plain edit distance would rank them behind unrelated short keys, so a
// prefix or a long enough substring counts as nearly exact.
size_t KeyDistance(std::string_view typed, std::string_view known) {
  const std::string a = Lowercase(typed), b = Lowercase(known);
  if (a == b) return 0;
  constexpr size_t kMinFragment = 4;
  const std::string &shorter = a.size() < b.size() ? a : b;
  const std::string &longer = a.size() < b.size() ? b : a;
  if (shorter.size() >= kMinFragment) {
    if (longer.compare(0, shorter.size(), shorter) == 0) return 1;
    if (longer.find(shorter) != std::string::npos) return 2;
  }
  // The distance is at least the difference in length: a key far longer or
  // shorter than a known one is not a typo of it, and the O(n m) table for
  // a huge key (a 1 MB key took 8 s) is never built.
  const size_t gap = longer.size() - shorter.size();
  if (gap > shorter.size() + 8) return gap;
  return EditDistance(a, b);
}

// The section path as a person reads it: "optimizer.params:SGD" is shown as
// "optimizer.params".
std::string_view SectionPath(std::string_view section) {
  return section.substr(0, section.find(':'));
}

std::string_view SectionType(std::string_view section) {
  const size_t colon = section.find(':');
  return colon == std::string_view::npos ? std::string_view() : section.substr(colon + 1);
}

std::string DescribeSection(std::string_view section, std::string_view path) {
  std::string where = path.empty() ? "at top level" : "in " + std::string(path);
  if (!SectionType(section).empty()) where += " (type " + std::string(SectionType(section)) + ")";
  return where;
}

std::vector<std::string_view> KeysOf(std::string_view section) {
  std::vector<std::string_view> keys;
  for (const ConfigKeyInfo &info : kKeys) {
    if (info.section == section && info.key != "*") keys.push_back(info.key);
  }
  return keys;
}

std::string_view NearestKey(std::string_view section, std::string_view typed) {
  return config_internal::NearestName(typed, KeysOf(section));
}

// Where else the exact key is recognised, e.g. "lr" typed at top level lives
// in optimizer.params. Returns a phrase, or "" when the key is not specific
// enough (like "enabled", which most sections have).
std::string ElsewhereHint(std::string_view section, std::string_view typed) {
  std::vector<std::string_view> other_types;  // same path, other "type"
  std::vector<std::string_view> other_paths;
  const std::string lowered = Lowercase(typed);
  for (const ConfigKeyInfo &info : kKeys) {
    if (info.section == section || Lowercase(info.key) != lowered) continue;
    if (SectionPath(info.section) == SectionPath(section)) {
      other_types.push_back(SectionType(info.section));
    } else if (std::find(other_paths.begin(), other_paths.end(), SectionPath(info.section)) ==
               other_paths.end()) {
      other_paths.push_back(SectionPath(info.section));
    }
  }
  // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) on
  // "literal" + std::string temporaries here at -O3.
  std::string hint = config_internal::Shorten(config_internal::Json(std::string(typed)));
  if (!other_types.empty() && other_types.size() <= 2) {
    hint.append(" is a parameter of type ").append(other_types[0]);
    if (other_types.size() == 2) hint.append(" and ").append(other_types[1]);
    return hint;
  }
  if (other_paths.empty() || other_paths.size() > 2) return "";
  for (size_t i = 0; i < other_paths.size(); ++i) {
    hint.append(i == 0 ? " belongs in " : " or ");
    hint.append(other_paths[i].empty() ? std::string_view("the top level") : other_paths[i]);
  }
  return hint;
}

std::string ListKeys(const std::vector<std::string_view> &keys) {
  std::string list;
  for (std::string_view key : keys) list += (list.empty() ? "" : ", ") + std::string(key);
  return list;
}

}  // namespace

std::span<const ConfigKeyInfo> KnownConfigKeys() {
  return kKeys;
}

std::string ConfigKeysMarkdown() {
  std::string out;
  std::string_view current;
  bool first = true;
  for (const ConfigKeyInfo &info : kKeys) {
    if (first || info.section != current) {
      current = info.section;
      first = false;
      out += "\n### " + (current.empty() ? std::string("top level") : std::string(current)) +
             "\n\n| key | accepts | dstrain |\n|---|---|---|\n";
    }
    out += "| `" + std::string(info.key) + "` | " + std::string(info.accepts) + " | " +
           std::string(info.doc) + " |\n";
  }
  return out;
}

namespace config_internal {

std::string_view NearestName(std::string_view typed, std::span<const std::string_view> names) {
  std::string_view best;
  size_t best_distance = SIZE_MAX;
  for (std::string_view known : names) {
    const size_t distance = KeyDistance(typed, known);
    if (distance < best_distance) best_distance = distance, best = known;
  }
  // Suggest only when the guess is plausibly what was meant: one edit per
  // three characters typed, so "foo" suggests nothing rather than "aio".
  const size_t tolerated = std::max<size_t>(1, typed.size() / 3);
  return best_distance <= tolerated ? best : std::string_view();
}

const ConfigKeyInfo *FindConfigKey(std::string_view section, std::string_view key) {
  const ConfigKeyInfo *wildcard = nullptr;
  for (const ConfigKeyInfo &info : kKeys) {
    if (info.section != section) continue;
    if (info.key == key) return &info;
    if (info.key == "*") wildcard = &info;
  }
  return wildcard;
}

std::string UnknownKeyMessage(std::string_view section, std::string_view path,
                              std::string_view key) {
  std::string message =
      "unknown key " + Shorten(Json(std::string(key))) + " " + DescribeSection(section, path);
  if (const std::string_view nearest = NearestKey(section, key); !nearest.empty()) {
    return message + "; did you mean \"" + std::string(nearest) + "\"?";
  }
  if (const std::string hint = ElsewhereHint(section, key); !hint.empty()) {
    return message + "; " + hint;
  }
  // Small sections are listed in full; the top level is too long for that.
  constexpr size_t kMaxListed = 10;
  const std::vector<std::string_view> keys = KeysOf(section);
  if (!keys.empty() && keys.size() <= kMaxListed) {
    return message + "; known keys here: " + ListKeys(keys);
  }
  return message;
}

}  // namespace config_internal
}  // namespace dst
