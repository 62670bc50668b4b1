// Engine: one rank's training state — model, optimizer, schedule, timers —
// and the instruction executor that runs train/eval steps over it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/comm/comm_stats.h"
#include "core/comm/communicator.h"
#include "core/comm/launch_env.h"
#include "core/comm/store.h"
#include "core/common/status.h"
#include "core/config/config.h"
#include "core/engine/batch.h"
#include "core/engine/batch_check.h"
#include "core/engine/checkpoint_coordinator.h"
#include "core/engine/executor.h"
#include "core/engine/job.h"
#include "core/engine/schedule.h"
#include "core/engine/step_profiler.h"
#include "core/engine/straggler.h"
#include "core/engine/telemetry.h"
#include "core/engine/training_device.h"
#include "core/model/model.h"
#include "core/optim/optimizer.h"
#include "core/pipeline/stage_link.h"
#include "core/pipeline/stage_plan.h"
#include "core/pipeline/tied_weights.h"
#include "core/precision/loss_scaler.h"
#include "core/runtime/memory.h"
#include "core/zero/parallelism.h"
#include "metrics/step_sample.h"

namespace dst {

struct EngineOptions {
  std::string config_text, config_path;  // exactly one
  std::string model_text, model_path;    // exactly one
  int64_t total_steps = 0;
};

struct EngineInfo {
  ModelSpec::Type model_type;
  ModelSpec::Loss loss;
  int64_t num_parameters, train_batch_size, micro_batch_size, grad_accum_steps, dp_size, rank,
      world_size, seq_len, vocab_size, input_dim, output_dim;
  int64_t dp_rank, pp_size, pp_rank, tp_size, tp_rank;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Create(const EngineOptions &options);
  ~Engine();
  // For a caller that has seen a peer fail: closes the monitor, the
  // communicator and the store connection now, and makes the destructor skip
  // the closing handshake and rank 0's wait for the others, so destroying the
  // engine waits for no peer. The engine is unusable afterwards; only
  // destruction is left.
  void Abort();
  // From any thread, while a call runs on another: a call waiting on a peer
  // (a collective, a pipeline exchange, the rendezvous store) returns
  // kAborted within a second, one that computes returns at its next
  // instruction, and the peers waiting on this rank are told (its heartbeat
  // says "aborted"). Only Abort() and destruction are left afterwards. One
  // atomic store: no lock, no allocation.
  void RequestAbort() noexcept { abort_->Raise(); }
  bool abort_requested() const noexcept { return abort_->raised(); }

  Status TrainBatch(const BatchView &batch, float *loss);
  Status EvalBatch(const BatchView &batch, float *loss);
  Status ForwardBackward(const BatchView &batch, float *loss);

  int64_t steps() const { return progress_.steps; }
  double NextLearningRate() const;
  // fp16: the loss scale (1 otherwise) and the steps skipped on overflow.
  double loss_scale() const { return scaler_.scale(); }
  int64_t skipped_steps() const { return progress_.skipped_steps; }
  EngineInfo Info() const;

  // The whole model's tensors (single-rank names and shapes), whichever
  // pipeline stage holds them.
  const std::vector<ParamDecl> &ParamDecls() const { return whole_decls_; }
  // Whole tensors at every ZeRO stage and pipeline layout. With pp > 1 the
  // stage holding the tensor reads it and broadcasts it over the pipeline
  // group, so every rank must call for the same tensors in the same order.
  // At stage 3 with dp > 1, GetParam
  // gathers the tensor from its owners: every rank must call it for the same
  // tensors in the same order (tensors kept whole, under
  // stage3_param_persistence_threshold, are read locally). SetParam expects
  // the same data on every rank. At stages 2 and 3, GetGrad reads the full
  // gradient that ForwardBackward gathered; after TrainBatch it is an error.
  Status GetParam(const std::string &name, float *data, size_t count) const;
  Status SetParam(const std::string &name, const float *data, size_t count);
  Status GetGrad(const std::string &name, float *data, size_t count) const;

  Status SaveCheckpoint(const std::string &dir, const std::string &tag,
                        const std::string &client_state_json);
  Status LoadCheckpoint(const std::string &dir, const std::string &tag,
                        std::string *client_state_json);
  // The checkpoint's weights alone (CheckpointCoordinator::LoadWeights).
  Status LoadWeights(const std::string &dir, const std::string &tag);

  std::string MetricsJson() const;
  // dst_engine_memory_status: memory per category, the process, the machine.
  std::string MemoryStatusJson() const;
  // The dashboard's address ("http://host:port/"), or "" when HTTP is off.
  std::string MonitorUrl() const;
  nlohmann::json CommJson() const;
  const std::string &ConfigJson() const { return config_.resolved_json; }
  const Config &config() const { return config_; }
  MemoryTracker &memory() { return memory_; }

 private:
  Engine(Config config, ModelSpec spec, Job job, std::optional<StagePlan> plan,
         std::unique_ptr<TrainingDevice> device);

  // Validates `batch`, then runs the program of `kind` over it.
  Status RunProgram(Op kind, const BatchView &batch, const char *call, bool exact_train,
                    float *loss);
  // Runs `program`, remembering a failure (the engine then skips the closing handshake).
  Status RunAndNoteFailure(const std::vector<Instruction> &program, const BatchView &batch,
                           double *mean_loss);
  void QuiesceBeforeClose();
  void SetUpPipeline(const ActivationLimits &limits);
  // The whole model's tensor `name` (*whole) and its id in this rank's
  // model (*local, -1 when another pipeline stage holds it).
  Status FindParam(const std::string &name, const char *call, size_t count, int *whole,
                   int *local) const;
  // With pp > 1: the tensor read on the stage holding it, sent to every stage.
  Status ShareOverStages(int whole, float *data) const;
  // Tensor `id` read by `read(id, out)` into the global tensor `data`: a
  // whole tensor directly, a tensor-parallel slice gathered over the tp group.
  template <typename Read>
  Status ReadGlobal(int id, float *data, Read read) const;
  // The prepared program for `micro_batches` of a kind (kOptimizerStep:
  // train, kBackward: forward_backward, kForward: eval), built on first use
  // and reused, so a step allocates nothing.
  Result<const std::vector<Instruction> *> Program(Op kind, int64_t micro_batches);
  std::chrono::milliseconds CommTimeout() const;

  // kRecordStep: the step into telemetry (totals, monitor, job table).
  Status OnStep(const StepRecord &record);
  Status CheckStragglers();

  Config config_;
  LaunchEnv env_;
  std::shared_ptr<AbortSignal> abort_;      // RequestAbort; shared with the store and the groups
  CommStats comm_stats_;                    // fed by every group's completion hook
  std::unique_ptr<Store> store_;            // rendezvous (multi-rank jobs)
  std::unique_ptr<Heartbeat> heartbeat_;    // this rank's liveness (multi-rank jobs)
  ProcessGroups groups_;                    // dp, tp, pp communicators of this rank
  Communicator *dp_comm_;                   // groups_.dp
  MemoryTracker memory_;                    // declared before everything it accounts
  std::unique_ptr<TrainingDevice> device_;  // dstrain.device "cuda" (null: the CPU)
  std::unique_ptr<Model<float>> model_;
  std::unique_ptr<DataParallelism> dp_;  // gradient reduction, (sharded) optimizer, precision
  LossScaler scaler_;                    // fp16 loss scaling (identity otherwise)
  TrainingProgress progress_;            // steps taken and skipped
  std::optional<StagePlan> plan_;        // pp > 1: the stages and the schedule
  std::vector<ParamDecl> whole_decls_;   // the whole model's tensors
  std::vector<int64_t> holder_;          // per whole tensor: the pp rank that reads it
  std::unique_ptr<StageLink> link_;      // pp > 1: sends and receives between stages
  std::unique_ptr<TiedWeights> tied_;    // pp > 1, GPT: the wte copies
  std::unique_ptr<Executor> executor_;   // runs the programs
  // dstrain.trace and flops_profiler; made first in the constructor (the
  // communicators' completion hooks read it), attached once the model exists.
  std::unique_ptr<StepProfiler> profiler_;
  std::unique_ptr<StragglerDetector> straggler_;  // communication.slow_node_tolerance
  double injected_slowness_ = 0;  // DSTRAIN_INJECT_SLOW_RANK: seconds added to each step here
  bool failed_ = false;           // a step failed: no closing handshake
  bool aborted_ = false;          // Abort(): no handshake, no wait for peers
  std::unique_ptr<Telemetry> telemetry_;                // metrics: samples, monitor, JSON
  std::unique_ptr<CheckpointCoordinator> checkpoints_;  // save / load
  std::map<std::pair<int, int64_t>, std::vector<Instruction>> programs_;
};

}  // namespace dst
