// Looking inside chosen steps: the step trace (dstrain.trace) and the flops
// profiler (flops_profiler). Both arm for their steps only; an unarmed step
// costs one null check per layer and per collective.
//
// Trace: each rank writes path/dstrain_trace_rank<R>.json in Chrome's
// trace-event format (load it in Perfetto or chrome://tracing), rewritten
// after every traced step: one process per rank, lanes for the program's
// instructions (zero gradients, forward / backward per micro-batch, the
// reduction, clipping, the optimizer step, pipeline sends and receives), the
// layers' computation (forward, recomputation, backward per layer), and the
// collectives of each group (op, bytes; drawn from start to completion on
// the communication thread).
//
// Flops profiler: at profile_step, rank 0 prints (or writes to output_file)
// DeepSpeed's profile for its layers: per layer its kind, parameters,
// forward FLOPs, forward and backward latency and FLOP/s (backward FLOPs =
// 2 x forward), the totals of the step, and the top_modules slowest layers.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/comm_stats.h"
#include "core/common/status.h"
#include "core/config/config.h"
#include "core/engine/executor.h"
#include "core/model/model.h"

namespace dst {

class StepProfiler final : public LayerTimer {
 public:
  StepProfiler(const Config &config, int64_t rank);
  ~StepProfiler() override;
  // The model and executor it arms (outliving it).
  void Attach(Model<float> *model, Executor *executor);
  // Creates the trace directory: a path that cannot be one is named now.
  Status Prepare();

  // Before training step `step` (DeepSpeed's global_steps, 0-based).
  void BeginStep(int64_t step);
  // After it (its record); also after a failed step (record null).
  void EndStep(const StepRecord *record);

  // LayerTimer: a layer's pass (main thread).
  void Record(LayerPass pass, size_t layer, int64_t micro_rows, TimePoint begin,
              TimePoint end) override;
  // A collective completed (communication threads).
  void OnCollective(CommGroup group, const CommRecord &r);

  // Times every step's layers (straggler detection), not only armed ones.
  void TimeEveryStep() { every_step_ = true; }
  // The layers' compute seconds of the last step (timed steps only, else 0).
  double step_compute_seconds() const { return compute_seconds_; }

  // The flops profile as printed, once profile_step has run ("" before).
  const std::string &flops_report() const { return flops_report_; }

 private:
  struct TraceEvent {
    std::string name;
    const char *category;
    int lane;
    double ts_us, dur_us;
    std::string args;  // a JSON object's text
  };
  struct LayerTimes {
    double forward = 0, backward = 0, recompute = 0;
    int64_t forward_calls = 0;
  };
  bool Tracing(int64_t step) const;
  double Micros(TimePoint t) const;
  void AddInstructions(const StepRecord &record);
  Status WriteTrace() const;
  std::string FlopsReport(const StepRecord &record) const;

  const Config &config_;
  int64_t rank_;
  Model<float> *model_ = nullptr;
  Executor *executor_ = nullptr;
  TimePoint origin_;
  std::atomic<bool> armed_{false};
  bool tracing_ = false, profiling_ = false;
  int64_t step_ = -1;
  mutable std::mutex mu_;  // events_ (collectives arrive on other threads)
  std::vector<TraceEvent> events_;
  std::vector<LayerTimes> layer_times_;
  std::string flops_report_;
  bool warned_ = false;
  bool every_step_ = false;
  double compute_seconds_ = 0;
};

}  // namespace dst
