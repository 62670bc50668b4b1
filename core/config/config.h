// Config: the typed, validated, immutable form of a DeepSpeed-style
// ds_config.json, with every "auto" resolved. Nothing below core/engine sees
// JSON; they receive these structs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/status.h"

namespace dst {

enum class OptimizerType { kAdamW, kAdam, kSGD, kLamb, kOneBitAdam, kZeroOneAdam, kOneBitLamb };
enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };
enum class DType { kFloat32, kFloat16, kBFloat16 };
// "fp32", "fp16", "bf16".
const char *DTypeName(DType dtype);

struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};  // Adam / AdamW
  double eps = 1e-8;                           // Adam / AdamW
  double weight_decay = 0.0;
  bool adam_w_mode = true;  // "Adam": DeepSpeed default true = decoupled decay
  double momentum = 0.0;    // SGD
  double dampening = 0.0;   // SGD
  bool nesterov = false;    // SGD
  // Adam / AdamW: divide the moments by (1 - beta^t) (DeepSpeed's default);
  // false: FusedAdam's bias_correction=False, the raw moments.
  bool bias_correction = true;
  // Lamb (DeepSpeed's FusedLamb): the trust ratio's clamp, and where eps goes
  // (sqrt(v + eps) instead of sqrt(v) + eps).
  double max_coeff = 10.0;
  double min_coeff = 0.01;
  bool eps_inside_sqrt = false;
  // OneBitAdam: steps of plain Adam (gradients all-reduced) before the
  // momentum is exchanged compressed and the variance frozen.
  int64_t freeze_step = 100000;
  // ZeroOneAdam (zero_one_policy.h): the last step that updates the
  // variance, the variance steps between doublings of their interval, the
  // local steps between doublings of theirs, and that interval's cap.
  int64_t var_freeze_step = 100000;
  int64_t var_update_scaler = 16;
  int64_t local_step_scaler = 32678;
  int64_t local_step_clipper = 16;
  // OneBitLamb (freeze_step too): the warm-up's trust-ratio average, and the
  // bounds of the factor that rescales the frozen ratio after it.
  double coeff_beta = 0.9;
  double factor_max = 4.0;
  double factor_min = 0.5;
  double factor_threshold = 0.1;
};

// DeepSpeed's lr_schedules.py parameter names.
struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;
  double warmup_min_lr = 0.0;       // WarmupLR, WarmupDecayLR
  double warmup_max_lr = 0.001;     // WarmupLR, WarmupDecayLR
  int64_t warmup_num_steps = 1000;  // all three
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = 0;    // WarmupDecayLR, WarmupCosineLR
  double warmup_min_ratio = 0.0;  // WarmupCosineLR
  double cos_min_ratio = 0.0001;  // WarmupCosineLR
};

struct ZeroConfig {
  int stage = 0;
  bool overlap_comm = false;
  bool contiguous_gradients = true;
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  std::string offload_optimizer_device = "none";  // none | cpu | nvme
  // On a device: ZeRO-Offload's transfer buffers page-locked (DeepSpeed's
  // default: off).
  bool offload_optimizer_pin_memory = false;
  std::string offload_param_device = "none";
  // Elements the optimizer steps at a time (DeepSpeed: ZeRO 3's sub-groups;
  // ours at every stage): the piece the NVMe tier reads, updates and writes.
  int64_t sub_group_size = 1000000000;
  // offload_optimizer's NVMe settings (DeepSpeed's names and defaults).
  std::string offload_optimizer_nvme_path;
  int64_t offload_optimizer_buffer_count = 4;
  bool offload_optimizer_pipeline_read = false;   // read piece i + 1 while piece i computes
  bool offload_optimizer_pipeline_write = false;  // write piece i - 1 while piece i computes
  // offload_param's NVMe settings (ZeRO 3; DeepSpeed's names and defaults).
  std::string offload_param_nvme_path;
  int64_t offload_param_buffer_count = 5;         // windows a layer's share is read into
  int64_t offload_param_buffer_size = 100000000;  // elements: the largest share of one layer
  int64_t offload_param_max_in_cpu = 1000000000;  // elements of the shard kept in memory
  // Stage 3 per layer type (core/zero/param_types.h): only these types are
  // partitioned (empty: all), and these are kept whole on every rank.
  std::vector<std::string> zero_allowed_param_types, zero_force_param_types;
};

// The layer types zero_allowed_param_types / zero_force_param_types name
// (core/zero/param_types.h maps the tensors onto them).
inline constexpr std::array<std::string_view, 6> kZeroParamTypes = {
    "Linear", "Embedding", "LayerNorm", "RMSNorm", "Attention", "CrossAttention"};

// DeepSpeed's "aio" section: how the NVMe tier talks to its files.
struct AioConfig {
  int64_t block_size = 1048576;  // bytes per request
  int64_t queue_depth = 8;       // requests in flight
  int64_t intra_op_parallelism = 1;
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
  bool present = false;  // the section was given (else the engine's defaults)
};

struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;  // 0 = dynamic
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  // fp16_override_modules: layer types (kZeroParamTypes) whose parameters,
  // gradients and activations stay fp32 while the rest trains in fp16.
  std::vector<std::string> override_modules;
};

struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  int64_t number_checkpoints = 0;  // 0 = unset
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
  // Ours (Megatron's recompute_granularity): "full" recomputes every kept
  // block's forward in backward; "selective" keeps everything but the
  // attention core's softmax probabilities ([B, H, T, T]: cheap to
  // recompute, expensive to keep), recomputed from Q and K in backward.
  std::string recompute_granularity = "full";
  // The section was given: since dstrain owns the model, that turns full
  // recomputation on (every block), unless pipeline.activation_checkpoint_interval
  // says otherwise.
  bool present = false;
};

// Pipeline parallelism: DeepSpeed's "pipeline" section and the tutorials'
// "pipeline_parallel" (pp_size lives in Config beside dp_size and tp_size).
struct PipelineConfig {
  // How layers are cut into stages: "parameters" (DeepSpeed's default:
  // balanced parameter counts), "uniform" (layer counts), "type:REGEX"
  // (balanced count of layers whose kind matches), "cost" (balanced forward +
  // backward FLOPs, embedding and loss included).
  std::string partition_method = "parameters";
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved | zb-h1
  int64_t virtual_stages = 1;     // model chunks per rank (interleaved)
  // Layers between activation checkpoints: -1 unset, 0 off, 1 every layer.
  int64_t activation_checkpoint_interval = -1;
};

// Metrics export: "dstrain": {"monitor": {...}} (dstrain's own keys), and
// DeepSpeed's csv_monitor {enabled, output_path, job_name}, which turns on
// the CSV log.
struct MonitorHttpConfig {
  bool enabled = false;
  std::string host = "127.0.0.1";  // loopback unless the user says otherwise
  int port = 9400;                 // base port; a rank listens on port + local rank
  std::string token;               // bearer token; empty = none (env DSTRAIN_MONITOR_TOKEN wins)
};

struct MonitorLogConfig {
  bool enabled = false;
  std::string path = "dstrain_metrics";  // directory; one file per rank
  std::string format = "csv";            // csv | jsonl
};

struct MonitorConfig {
  bool enabled = false;  // the per-rank registry; implied by http or log
  std::string job = "dstrain";
  int64_t history_steps = 1000;      // steps kept for /api/v1/history
  double peak_flops_per_second = 0;  // one rank's peak, for MFU; 0 = unknown (MFU reported as 0)
  MonitorHttpConfig http;
  MonitorLogConfig log;
};

// dstrain's own keys live under "dstrain": {...} so that a DeepSpeed config
// stays a DeepSpeed config.
struct RuntimeConfig {
  int num_threads = 0;   // 0: DSTRAIN_NUM_THREADS, else OMP_NUM_THREADS, else all cores
  uint64_t seed = 1234;  // data order and any runtime randomness
  double comm_timeout_seconds = 300.0;  // every collective and the rendezvous
  // Continue from the optimizer swap files a killed run left under
  // offload_optimizer.nvme_path (their last commit every rank holds),
  // instead of starting afresh; without such files the run starts afresh.
  bool resume_from_swap = false;
  // Where this rank trains: "cpu", or "cuda" (the GPU LOCAL_RANK names,
  // through the CUDA plugin; the layouts it runs: CheckDeviceSupported).
  std::string device = "cpu";
  // dstrain.unknown_keys "warn": the top-level keys no table knows, each
  // named in a warning instead of an error (a pasted config's stray keys).
  bool warn_unknown_keys = false;
  std::vector<std::string> ignored_keys;
};

// gradient_compression: the data-parallel gradient reduction of ZeRO 0 and 1
// sends an encoding of each bucket (plus the rank's error-feedback residual)
// by all-gather instead of all-reducing it (core/zero/grad_codec.h).
struct GradientCompressionConfig {
  bool enabled = false;
  std::string algorithm = "topk";  // "topk", "1bit", "2bit"
  double topk_ratio = 0.01;        // (0, 1]: the share of each bucket top-k sends
  bool huffman_coding = false;     // top-k: entropy-code the indices
  // Deep Gradient Compression's warm-up: the first warmup_steps optimizer
  // steps reduce their gradients uncompressed (fp32); the residuals start
  // with the first compressed step.
  int64_t warmup_steps = 0;
  // Deep Gradient Compression's momentum correction (SGD with momentum):
  // each rank accumulates its own velocity u = momentum u + (1 - dampening) g
  // and compresses that (with error feedback); the optimizer then steps
  // without momentum. With top-k, momentum factor masking zeroes the
  // velocity of the entries sent.
  bool momentum_correction = false;
  // 1bit / 2bit: elements per fp32 scale (the payload carries one per chunk).
  int64_t chunk_size = 2048;
  // What travels compressed: "gradient" (the reduction) or "update" — at
  // ZeRO 0 each rank steps its own optimizer on its own gradients and the
  // step's change to the weights is what is compressed, with error feedback
  // (Efficient-Adam, Chen et al. 2022); Adam's moments then see only their
  // rank's data, but no coordinate's step is delayed or flattened by them.
  std::string target = "gradient";
};

// flops_profiler (DeepSpeed's keys): at `profile_step` (DeepSpeed's
// global_steps, 0-based), a per-layer table of parameters, FLOPs, forward and
// backward latency and FLOP/s, with the totals, from rank 0.
struct FlopsProfilerConfig {
  bool enabled = false;
  int64_t profile_step = 1;
  int64_t module_depth = -1;  // 0: totals only; otherwise every layer
  int64_t top_modules = 1;    // the slowest layers listed after the table
  bool detailed = true;       // the per-layer table
  std::string output_file;    // "" = the log (stdout)
};

// DeepSpeed's autotuning section. `dstrain autotune` reads its tuning keys
// (search space, tuner, directories) from the file itself; the engine serves
// a trial: with enabled and a metric_path, rank 0 writes the mean of global
// steps start_profile_step..end_profile_step (0-based) to metric_path as
// DeepSpeed's engine does ({"throughput": samples/s, "latency": ms per step,
// "FLOPS_per_gpu"}) once end_profile_step has run. Training goes on: the
// tuner ends the trial when the file appears.
struct AutotuningConfig {
  bool enabled = false;
  std::string metric = "throughput";  // "throughput", "latency" or "flops"
  int64_t start_profile_step = 3;
  int64_t end_profile_step = 5;
  std::string metric_path;  // "" = no trial is being measured
};

// dstrain.trace: each rank's timeline of the listed steps (0-based global
// steps) as Chrome trace JSON, path/dstrain_trace_rank<R>.json.
struct TraceConfig {
  bool enabled = false;
  std::vector<int64_t> steps = {1, 2};
  std::string path = "dstrain_trace";
};

// communication (the articles' section): `topology` names the collectives'
// shape ("tree": halving-doubling, what the Gloo backend runs; 3: one level
// per axis of the 3D grid, i.e. the dp, tp and pp groups); straggler
// detection compares the ranks' compute time every steps_per_print steps.
struct CommunicationConfig {
  std::string topology = "tree";
  double slow_node_tolerance = -1;  // < 0: off; 0.1 = 10% over the median
};

struct Config {
  // Batch identity: train_batch_size = micro_batch * grad_accum * dp_size.
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
  int64_t dp_size = 1;
  int64_t tp_size = 1;
  // tensor_parallel.sequence_parallel (Megatron's --sequence-parallel):
  // outside the tensor-parallel regions a tp rank holds 1/tp of the token rows.
  bool sequence_parallel = false;
  int64_t pp_size = 1;
  int64_t pipeline_micro_batches = 0;  // pipeline_parallel.micro_batches; 0 = unset

  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  ZeroConfig zero;
  AioConfig aio;
  Fp16Config fp16;
  bool bf16_enabled = false;
  std::vector<std::string> bf16_override_modules;  // bf16.bf16_override_modules, as fp16's
  // The dtype gradients are reduced in. Unset in the file: the training
  // dtype (DeepSpeed's default), i.e. fp32, or fp16/bf16 under mixed precision.
  DType communication_data_type = DType::kFloat32;
  GradientCompressionConfig gradient_compression;
  CommunicationConfig communication;
  FlopsProfilerConfig flops_profiler;
  TraceConfig trace;
  AutotuningConfig autotuning;
  double gradient_clipping = 0.0;  // 0 = off
  // DeepSpeed's gradient averaging around the data-parallel reduction:
  // prescale_gradients divides each rank's gradients by the dp size before
  // the reduction; otherwise they are divided by gradient_predivide_factor
  // before it and multiplied by factor / dp size after it (factor 1: the
  // plain mean after the sum).
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  ActivationCheckpointingConfig activation_checkpointing;
  PipelineConfig pipeline;
  RuntimeConfig runtime;
  MonitorConfig monitor;

  std::string resolved_json;  // the config with "auto" filled in, for reports

  // The training dtype of parameters, activations and gradients (fp32 master
  // weights and optimizer state under fp16/bf16).
  // Full activation recomputation in groups of this many layers (keep each
  // group's input, recompute the group's forward in its backward), 0 = off:
  // pipeline.activation_checkpoint_interval when given, else 1 when an
  // activation_checkpointing section asks for full recomputation.
  int64_t recompute_interval() const {
    if (pipeline.activation_checkpoint_interval >= 0)
      return pipeline.activation_checkpoint_interval;
    return activation_checkpointing.present && !selective_recompute() ? 1 : 0;
  }
  bool recompute_activations() const { return recompute_interval() > 0; }
  // Megatron's selective recomputation: only the attention core's probabilities.
  bool selective_recompute() const {
    return activation_checkpointing.present &&
           activation_checkpointing.recompute_granularity == "selective";
  }
  DType precision() const {
    return fp16.enabled ? DType::kFloat16 : bf16_enabled ? DType::kBFloat16 : DType::kFloat32;
  }
  // The layer types kept in fp32 by the enabled 16-bit mode's override list
  // (fp16.fp16_override_modules or bf16.bf16_override_modules); none under fp32.
  const std::vector<std::string> &fp32_modules() const {
    static const std::vector<std::string> kNone;
    return fp16.enabled ? fp16.override_modules : bf16_enabled ? bf16_override_modules : kNone;
  }
};

// What the parser needs to know about the job to resolve "auto" and check
// the batch identity.
struct ConfigContext {
  int64_t world_size = 1;   // processes in the job
  int64_t total_steps = 0;  // optimizer steps the caller plans; 0 = unknown
};

// Parses, resolves "auto" and validates. Errors name the JSON path, the
// expected and the found value; unknown keys name the nearest known key;
// recognised keys of features not built yet are kNotSupported errors.
Result<Config> ParseConfig(std::string_view json_text, const ConfigContext &context);

// The optimizer as the data-parallel step runs it: under gradient_compression's
// momentum_correction (more than one data-parallel rank) SGD's momentum is
// applied by each rank before compression, so the step itself has none.
OptimizerConfig SteppedOptimizer(const Config &config);

// Reads the file and parses it; I/O errors name the path.
Result<Config> LoadConfigFile(const std::string &path, const ConfigContext &context);

}  // namespace dst
