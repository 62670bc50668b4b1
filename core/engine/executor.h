// Executor: runs a prepared program (schedule.h) over one batch on one
// rank's model and data-parallel layer, and measures it. It reads each
// instruction's micro-batch, slot and flags and infers nothing; what a step
// means (clipping, fp16 overflow skips, the LR schedule) lives here, what a
// finished step is reported to (metrics) is the caller's StepObserver.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/common/abort_signal.h"
#include "core/common/status.h"
#include "core/config/config.h"
#include "core/engine/batch.h"
#include "core/engine/device_batch.h"
#include "core/engine/schedule.h"
#include "core/model/model.h"
#include "core/pipeline/stage_link.h"
#include "core/pipeline/tied_weights.h"
#include "core/precision/loss_scaler.h"
#include "core/zero/parallelism.h"
#include "metrics/step_sample.h"

namespace dst {

// Seconds spent per phase of a step. DeepSpeed's timers map onto them:
// forward; backward = backward_inner (the layers' backward, including
// reductions launched and waited for inside it) + backward_allreduce
// (stage 0/1) or backward_reduce_scatter (2/3) = `reduce` (finishing the
// reduction after the last layer); step = clipping + optimizer update.
// A pipeline's sends and receives are timed apart from them (DeepSpeed's
// pipe_send_output, pipe_recv_input, pipe_send_grad, pipe_recv_grad).
struct PhaseTimes {
  double forward = 0, backward = 0, reduce = 0, step = 0, total = 0;
  double send_output = 0, recv_input = 0, send_grad = 0, recv_grad = 0;
  void Add(const PhaseTimes &o) {
    forward += o.forward, backward += o.backward, reduce += o.reduce, step += o.step;
    total += o.total;
    send_output += o.send_output, recv_input += o.recv_input;
    send_grad += o.send_grad, recv_grad += o.recv_grad;
  }
};

// What one run of a program did.
struct StepRecord {
  double loss = 0;  // mean over the micro-batches, averaged over the data-parallel group
  double lr = 0, grad_norm = 0, seconds = 0;
  int64_t samples = 0, tokens = 0;  // job-wide: every data-parallel rank's micro-batches
  int64_t micro_batches = 1;
  bool skipped = false;  // fp16 overflow: no update
  PhaseTimes phases;
  // Pipeline stages, and every rank while a step is traced: every action of
  // the step with its start and end (seconds from `start`).
  std::vector<metrics::TimelineEvent> timeline;
  std::chrono::steady_clock::time_point start;
};

// The training counters a step advances.
struct TrainingProgress {
  int64_t steps = 0;          // optimizer steps, skipped ones included (DeepSpeed's global_steps)
  int64_t skipped_steps = 0;  // fp16 steps skipped on overflow (the LR schedule does not advance)
  // The LR schedule's iteration: skipped steps do not advance it.
  int64_t lr_iteration() const { return steps - skipped_steps; }
};

class Executor {
 public:
  // Called by kRecordStep with the step's record.
  using StepObserver = std::function<Status(const StepRecord &)>;

  // Everything must outlive the executor.
  Executor(const Config &config, Model<float> *model, DataParallelism *dp, LossScaler *scaler,
           TrainingProgress *progress);

  void SetStepObserver(StepObserver observer) { observer_ = std::move(observer); }
  // Pipeline parallelism: this rank's link to the other stages and the tied
  // weight it may hold a copy of (both outlive the executor). Without them
  // the program's pipeline instructions are errors.
  void SetPipeline(StageLink *link, TiedWeights *tied) {
    link_ = link, tied_ = tied;
    UpdateNormExclusions();
  }
  // Tensor parallelism: the tp group (outliving the executor) and the ids
  // of the tensors every tp rank holds whole (counted once in the norm).
  // Lamb's trust ratios then take each tensor's norms over its tp slices.
  void SetTensorParallel(Communicator *tp, std::vector<int> replicated);
  // Test hook (DSTRAIN_INJECT_GRAD_OVERFLOW): the steps at which this rank's
  // gradients are made infinite, as an fp16 overflow would.
  void InjectOverflowAt(std::vector<int64_t> steps) { inject_overflow_at_ = std::move(steps); }
  // The model computes on a device: each batch is copied into `memory`
  // (charged to `tracker`; both outlive the executor) before it runs.
  void StageBatchesIn(MemoryResource *memory, MemoryTracker *tracker) {
    device_batch_ = std::make_unique<DeviceBatch>(memory, tracker);
  }
  // Records the timeline of the next runs without a pipeline too (tracing).
  void SetRecordTimeline(bool on) { record_timeline_ = on; }
  // dst_engine_abort: once raised, a run stops before its next instruction
  // with kAborted (a step that computes without waiting on anyone ends
  // there too). Outlives the executor.
  void SetAbortSignal(const AbortSignal *signal) { abort_ = signal; }

  // Runs `program` (prepared by PrepareProgram for this batch's micro-batches
  // and the model's activation slots) over `batch`, already validated.
  Status Run(const std::vector<Instruction> &program, const BatchView &batch, StepRecord *record);

  // The learning rate the next optimizer step will use.
  double NextLearningRate() const;

 private:
  void UpdateNormExclusions();
  MicroBatch<float> MicroBatchAt(const BatchView &batch, int64_t index) const;
  int64_t CountedTargets(const BatchView &host, int64_t index) const;
  // The step's mean loss over the group, its duration and its job-wide samples.
  Status Finish(const BatchView &batch, double loss_sum,
                std::chrono::steady_clock::time_point start, StepRecord *rec);
  // kClipGradients: the global norm; an fp16 overflow marks the step skipped.
  Status Clip(double loss_sum, StepRecord *rec);
  // The global gradient norm (over the data-parallel group, the
  // tensor-parallel group and a pipeline's stages, a tied weight counted
  // once), the gradients clipped to gradient_clipping where it is finite.
  Result<double> ClipGradients();
  // A per-rank loss sum as the job's: averaged over the data-parallel group,
  // and with a pipeline taken from the last stage to every stage.
  Result<double> JobLoss(double loss_sum);
  // Runs one pipeline send or receive instruction.
  Status RunPipeOp(const Instruction &ins, const BatchView &batch, PhaseTimes *phases);

  const Config &config_;
  Model<float> *model_;
  DataParallelism *dp_;
  LossScaler *scaler_;
  TrainingProgress *progress_;
  StepObserver observer_;
  StageLink *link_ = nullptr;
  TiedWeights *tied_ = nullptr;
  // Lamb: each tensor's sums over its tp slices (a whole tensor's once).
  void UpdateTensorReducers();
  Status SumOverSlices(std::vector<double> *values, int per_tensor) const;
  Status MaxOverSlices(std::vector<double> *values) const;
  Communicator *tp_ = nullptr;      // tensor parallelism (null at tp 1)
  std::vector<int> tp_replicated_;  // tensors whole on every tp rank
  std::vector<int> norm_excluded_;  // left out of this rank's share of the norm
  std::vector<int64_t> inject_overflow_at_;
  std::unique_ptr<DeviceBatch> device_batch_;  // null: the layers read the caller's batch
  bool record_timeline_ = false;
  const AbortSignal *abort_ = nullptr;
};

}  // namespace dst
