// Telemetry: what one rank reports about its training. After each step
// (kRecordStep) it builds the step's metrics::StepSample — the one source of
// every figure: the monitor (Prometheus registry, history, log, HTTP) gets
// it, the metrics JSON of dst_engine_metrics_json is written from it, and
// rank 0's job-wide table reads it back from the store.
//
// Throughput has one meaning per name: `tokens_per_second` /
// `samples_per_second` (StepSample, Prometheus `dstrain_tokens_per_second`,
// the dashboard) count this rank's share; `job_tokens_per_sec` /
// `job_samples_per_sec` count every data-parallel rank's (what `dstrain
// train` prints). The metrics JSON's `tokens_per_sec` and `samples_per_sec`
// are the job-wide figures (kept under those names for older callers).
#pragma once

#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/comm/comm_stats.h"
#include "core/comm/launch_env.h"
#include "core/comm/store.h"
#include "core/common/status.h"
#include "core/config/config.h"
#include "core/engine/executor.h"
#include "core/kernels/compute_type.h"
#include "core/runtime/memory.h"
#include "core/zero/grad_compression.h"
#include "core/zero/onebit_allreduce.h"
#include "metrics/step_sample.h"

namespace dst {

class NvmeStateStore;
class ParameterPartition;

namespace metrics {
class Monitor;
}

// What telemetry needs to know about the rank and its model, fixed at creation.
struct TelemetryContext {
  const Config *config = nullptr;
  LaunchEnv env;
  MemoryTracker *memory = nullptr;
  std::string device = "cpu";  // where the rank trains (dstrain.device's TrainingDevice name)
  const CommStats *comm = nullptr;
  Store *store = nullptr;  // null on a single-rank job
  bool gpt = true;         // throughput in tokens (GPT) or samples
  int64_t num_parameters = 0;
  double flops_per_sample_token = 0;        // this rank's training FLOPs per token (GPT) or sample
  double model_flops_per_sample_token = 0;  // the whole model's (differs with a pipeline)
  int zero_stage = 0;
  ComputeType compute = ComputeType::kFp32;  // what the layers' GEMMs multiply in
  int64_t dp_size = 1, dp_rank = 0, tp_rank = 0, pp_rank = 0, pp_size = 1, tp_size = 1;
  const NvmeStateStore *nvme = nullptr;        // the optimizer's NVMe tier, when offloaded there
  const ParameterPartition *params = nullptr;  // ZeRO 3's parameter shard (swap: offload_param)
  const CompressionTotals *compression = nullptr;      // gradient_compression (dp > 1)
  const OneBitAllReduce *momentum_exchange = nullptr;  // OneBitAdam (dp > 1)
  int64_t fp32_parameters = 0;  // elements kept in fp32 by fp16/bf16_override_modules
};

// The engine's state a metrics JSON reports beside the last sample.
struct TrainingState {
  const TrainingProgress *progress = nullptr;
  double next_lr = 0;
  double loss_scale = 1;
};

// The last straggler check as this rank saw it (communication.slow_node_tolerance).
struct StragglerState {
  double compute_seconds = 0;  // the last step's layer compute
  bool slow = false;           // this rank, at the last check
  double slower_by = 0;        // over the median, at the last check
  nlohmann::json last_check = nullptr;
};

class Telemetry {
 public:
  explicit Telemetry(TelemetryContext context);
  ~Telemetry();

  // Starts dstrain.monitor (registry, log, HTTP) when the config enables it.
  Status StartMonitor();
  // Stops the monitor's threads (they read the store): before the store closes.
  void StopMonitor();
  // After a step: totals, the step's sample into the monitor, and every
  // steps_per_print steps into the store for rank 0's job-wide table.
  Status OnStep(const StepRecord &record, const TrainingProgress &progress, double loss_scale);

  // The metrics JSON (dst_engine_metrics_json): the last sample with live
  // memory and communication totals, plus the rank's fixed facts.
  std::string MetricsJson(const TrainingState &state) const;
  // Totals per collective since the engine was created.
  nlohmann::json CommJson() const;
  // offload.{optimizer,param}: the tiers and, on NVMe, the swap file and its I/O.
  nlohmann::json OffloadJson() const;
  // Bytes per memory category now and at their peak, the process's resident
  // set now and at its peak, the machine's total and available memory
  // (dst_engine_memory_status; DeepSpeed's see_memory_usage).
  nlohmann::json MemoryStatusJson() const;
  // {"name": "cpu" / "cuda:0" / "guarded", "bytes", "peak_bytes"}: the device's share.
  nlohmann::json DeviceMemoryJson() const;
  nlohmann::json ParamOffloadJson() const;
  nlohmann::json CompressionJson() const;
  // Before OnStep: the step's straggler figures.
  void SetStraggler(StragglerState state) { straggler_ = std::move(state); }
  // The dashboard's address ("http://host:port/"), or "" when HTTP is off.
  std::string MonitorUrl() const;

 private:
  metrics::RankIdentity Identity() const;
  // The sample of the last recorded step, memory and counters as they are now.
  metrics::StepSample BuildStepSample(const StepRecord &record, const TrainingProgress &progress,
                                      double loss_scale) const;
  // Bus bandwidth over the communication since the previous sample.
  void AddBusBandwidth(metrics::StepSample *sample);
  // Memory and communication counters as they are now.
  void FillLive(metrics::StepSample *sample) const;
  // Rank 0's table of every rank's last published sample (HTTP thread).
  nlohmann::json RankTable() const;
  // autotuning.metric_path: the profiled steps' metric, once they have run.
  Status RecordTrialMetric(const StepRecord &record, const TrainingProgress &progress);

  TelemetryContext ctx_;
  std::unique_ptr<metrics::Monitor> monitor_;  // null unless dstrain.monitor is enabled
  StepRecord last_record_;
  PhaseTimes total_times_;
  int64_t job_samples_ = 0, job_tokens_ = 0;  // every data-parallel rank's, since creation
  std::array<CommTotals, CommStats::kOps> comm_at_last_sample_{};  // for per-step bandwidth
  std::array<std::array<CommTotals, CommStats::kOps>, kNumCommGroups> group_at_last_sample_{};
  mutable std::string metrics_json_;
  StragglerState straggler_;
  struct TrialTotals {
    int64_t steps = 0;
    double seconds = 0, samples = 0, tokens = 0, flops = 0;
    bool written = false;
  } trial_;
};

}  // namespace dst
