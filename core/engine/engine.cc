#include "core/engine/engine.h"

#include "core/common/log.h"
#include "core/kernels/cpu/cpu_isa.h"
#include "core/kernels/cpu/gemm.h"

#include "core/engine/swap_resume.h"
#include "core/offload/nvme_state_store.h"
#include "core/offload/param_swap.h"

#include "core/engine/layout_memory.h"

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/config/config_file.h"
#include "core/kernels/cpu/gemm.h"
#include "core/layers/tp_tensors.h"
#include "core/model/family.h"
#include "core/optim/clip.h"
#include "core/optim/lr_schedule.h"
#include "core/runtime/threads.h"
#include "core/zero/data_parallel.h"
#include "metrics/monitor.h"

namespace dst {

// ---------------------------------------------------------------- creation

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions &options) {
  Result<std::string> config_text = TextOrFile(options.config_text, options.config_path, "config");
  if (!config_text.ok()) return config_text.status();
  Result<std::string> model_text = ModelSpecText(options.model_text, options.model_path);
  if (!model_text.ok()) return model_text.status();
  Result<LaunchEnv> env = DetectLaunchEnv();
  if (!env.ok()) return env.status();

  ConfigContext context;
  context.world_size = env.value().world_size;
  context.total_steps = options.total_steps;
  Result<Config> config = ParseConfig(config_text.value(), context);
  if (!config.ok()) return config.status();
  DST_RETURN_IF_ERROR(CheckThreadCount(config.value().runtime.num_threads));
  if (std::string bad = cpu::GemmBackendEnvError(); !bad.empty()) return ConfigError(bad);
  if (std::string bad = cpu::CpuIsaCapError(); !bad.empty()) return ConfigError(bad);
  if (!cpu::Bf16Compute().error.empty()) return ConfigError(cpu::Bf16Compute().error);
  Result<ModelSpec> spec = ParseModelSpec(model_text.value());
  if (!spec.ok()) return spec.status();
  DST_RETURN_IF_ERROR(
      CheckActivationSizes(spec.value(), config.value().train_micro_batch_size_per_gpu));

  // How tensor parallelism cuts the model is checked before anyone connects.
  Result<std::vector<TpRole>> roles = PlanTensorParallel(spec.value(), config.value().tp_size);
  if (!roles.ok()) return roles.status();
  std::optional<StagePlan> plan;
  if (config.value().pp_size > 1) {
    Result<StagePlan> planned = PlanStages(spec.value(), config.value());
    if (!planned.ok()) return planned.status();
    // The schedule of a step is checked before anything runs.
    Result<std::vector<std::vector<PipeAction>>> actions =
        planned.value().Actions(config.value().gradient_accumulation_steps);
    if (!actions.ok()) return actions.status();
    plan = std::move(planned).value();
  }
  std::unique_ptr<TrainingDevice> device;
  if (config.value().runtime.device == "cuda") {
    Result<std::unique_ptr<TrainingDevice>> opened = TrainingDevice::Open(env.value().local_rank);
    if (!opened.ok()) return opened.status();
    device = std::move(opened).value();
  }
  Result<Job> job = JoinJob(env.value(), config.value(),
                            config.value().resolved_json + spec.value().canonical_json);
  if (!job.ok()) return job.status();
  if (device)  // the groups' device twins (NCCL), connected in the same order on every rank
    DST_RETURN_IF_ERROR(device->AdoptGroups(&job.value().groups, job.value().store.get(),
                                            env.value().rank, job.value().common));
  std::unique_ptr<Engine> engine(new Engine(std::move(config).value(), std::move(spec).value(),
                                            std::move(job).value(), std::move(plan),
                                            std::move(device)));
  // A device reports a failed allocation here (the buffers are built).
  if (engine->device_) DST_RETURN_IF_ERROR(engine->device_->TakeStatus());
  // Checked here; the constructor gave the store the same faults.
  Result<std::vector<InjectedIoFault>> io_faults = ParseIoFaultInjection(engine->env_.rank);
  if (!io_faults.ok()) return io_faults.status();
  DST_RETURN_IF_ERROR(engine->profiler_->Prepare());
  DST_RETURN_IF_ERROR(engine->dp_->Start());
  if (engine->config_.runtime.resume_from_swap) {
    int64_t resumed = -1;
    DST_RETURN_IF_ERROR(ResumeFromSwap(engine->env_, engine->store_.get(), engine->CommTimeout(),
                                       engine->dp_.get(), &engine->progress_, &engine->scaler_,
                                       &resumed));
  } else if (!engine->model_->spec().hf_dir.empty()) {  // a pretrained model's weights
    DST_RETURN_IF_ERROR(engine->checkpoints_->LoadHfWeights(engine->model_->spec().hf_dir));
  }
  Result<double> slow = ParseSlowRankInjection(engine->env_.rank);
  if (!slow.ok()) return slow.status();
  engine->injected_slowness_ = slow.value();
  Result<std::vector<int64_t>> inject = ParseOverflowInjection(engine->env_.rank);
  if (!inject.ok()) return inject.status();
  engine->executor_->InjectOverflowAt(std::move(inject).value());
  DST_RETURN_IF_ERROR(engine->telemetry_->StartMonitor());
  return engine;
}

Engine::Engine(Config config, ModelSpec spec, Job job, std::optional<StagePlan> plan,
               std::unique_ptr<TrainingDevice> device)
    : config_(std::move(config)),
      env_(std::move(job.env)),
      abort_(std::move(job.abort)),
      store_(std::move(job.store)),
      heartbeat_(std::move(job.heartbeat)),
      groups_(std::move(job.groups)),
      dp_comm_(groups_.dp.get()),
      device_(std::move(device)),
      scaler_(config_.fp16),
      plan_(std::move(plan)) {
  SetNumThreads(ResolveNumThreads(config_.runtime.num_threads));
  profiler_ = std::make_unique<StepProfiler>(config_, env_.rank);
  SetLogRank(env_.rank);
  const std::pair<Communicator *, CommGroup> hooked[] = {{groups_.dp.get(), CommGroup::kDp},
                                                         {groups_.tp.get(), CommGroup::kTp},
                                                         {groups_.pp.get(), CommGroup::kPp},
                                                         {groups_.pp_p2p.get(), CommGroup::kPp}};
  for (const auto &hook : hooked) {
    const CommGroup kind = hook.second;
    hook.first->SetCompletionHook([this, kind](const CommRecord &r) {
      comm_stats_.Record(kind, r);
      DST_LOG(kDebug, "comm",
              std::string(CommOpName(r.op)) + " " + metrics::kCommGroupNames[size_t(kind)] + " " +
                  std::to_string(r.bytes) + " bytes " + std::to_string(r.seconds * 1e3) + " ms");
      profiler_->OnCollective(kind, r);
    });
  }
  ActivationLimits limits = ActivationLimitsFor(config_, spec, MaxThreads());
  if (device_ && spec.IsLanguageModel()) {  // a fused attention saves no probabilities
    const AttentionShape largest = AttentionShapeOf(FamilyOf(spec).block.attention, config_.tp_size,
                                                    groups_.coord.tp, limits.max_B, limits.max_T);
    device_->kernels().ChooseAttention(largest);
    limits.attention_probabilities = device_->kernels().KeepsAttentionProbabilities(largest);
  }
  const int64_t pp_rank = groups_.coord.pp;
  const ActivationOptions activations =
      ActivationOptionsFor(config_, plan_ ? &*plan_ : nullptr, pp_rank);
  ModelPart part;
  if (config_.tp_size > 1)
    part.tp = {groups_.tp.get(), config_.tp_size, groups_.coord.tp, config_.sequence_parallel,
               device_ ? device_->work_order() : nullptr};
  if (plan_) part.chunks = plan_->ChunksOf(pp_rank);
  // On a device every buffer of the model and the optimizer is its memory
  // and every kernel its backend's.
  const StepPlacement placement = device_ ? device_->placement() : StepPlacement{};
  model_ = std::make_unique<Model<float>>(
      spec, limits, &memory_,
      StoreOptionsForStage(config_.zero.stage, dp_comm_->size(), config_.precision()), activations,
      part, placement.memory);
  if (device_) model_->SetKernels(device_->kernels());
  // bf16 training multiplies in bf16 on a GPU, and where this CPU's bf16 dot products are
  // the faster ones (cpu::Bf16Compute); elsewhere, and for fp16, in fp32.
  const bool bf16_gemms = device_ ? device_->Bf16Gemms() : cpu::Bf16Compute().enabled;
  if (config_.precision() == DType::kBFloat16 && bf16_gemms)
    model_->SetComputeType(ComputeType::kBf16);
  // (activations.bf16_operands, the host's bf16 GEMMs, is Bf16Operands() here
  // by the same rule; Model::CheckPass refuses a pass where it is not.)
  Result<std::vector<InjectedIoFault>> io_faults = ParseIoFaultInjection(env_.rank);
  dp_ = std::make_unique<DataParallel>(
      config_, model_.get(), dp_comm_, &memory_,
      NvmeStateStoreMaker(
          config_, env_.rank,
          io_faults.ok() ? std::move(io_faults).value() : std::vector<InjectedIoFault>{}),
      ParamSwapOptionsFor(config_, env_.rank), placement);
  executor_ = std::make_unique<Executor>(config_, model_.get(), dp_.get(), &scaler_, &progress_);
  executor_->SetAbortSignal(abort_.get());
  if (device_) executor_->StageBatchesIn(placement.memory, &memory_);
  whole_decls_ = DeclareParameters(spec);
  holder_.assign(whole_decls_.size(), 0);
  if (plan_) SetUpPipeline(limits);
  if (config_.tp_size > 1) {  // tensors whole on every tp rank count once in the norm
    std::vector<int> replicated;
    const std::vector<ParamDecl> &decls = model_->params().decls();
    for (size_t k = 0; k < decls.size(); ++k)
      if (!decls[k].split.split()) replicated.push_back(int(k));
    executor_->SetTensorParallel(groups_.tp.get(), std::move(replicated));
  }
  executor_->SetStepObserver([this](const StepRecord &record) { return OnStep(record); });
  profiler_->Attach(model_.get(), executor_.get());
  if (config_.communication.slow_node_tolerance >= 0 && env_.world_size > 1 && store_) {
    straggler_ = std::make_unique<StragglerDetector>(store_.get(), env_.rank, env_.world_size,
                                                     config_.communication.slow_node_tolerance,
                                                     config_.steps_per_print, CommTimeout());
    profiler_->TimeEveryStep();
  }
  const int64_t T = limits.max_T;
  TelemetryContext telemetry;
  telemetry.config = &config_;
  telemetry.env = env_;
  telemetry.memory = &memory_;
  if (device_) telemetry.device = device_->name();
  telemetry.comm = &comm_stats_;
  telemetry.store = store_.get();
  telemetry.gpt = spec.IsLanguageModel();
  telemetry.num_parameters = model_->params().size();
  telemetry.flops_per_sample_token = 3.0 * model_->ForwardFlops(1, T) / double(T);
  double model_flops = 0;
  for (const LayerSummary &l : SummarizeLayers(spec, 1, T)) model_flops += l.forward_flops;
  telemetry.model_flops_per_sample_token = 3.0 * model_flops / double(T);
  telemetry.pp_size = config_.pp_size;
  telemetry.tp_size = config_.tp_size;
  telemetry.zero_stage = dp_->stage();
  telemetry.compute = model_->compute_type();
  telemetry.dp_size = dp_comm_->size();
  telemetry.dp_rank = groups_.coord.dp;
  telemetry.nvme = dynamic_cast<const NvmeStateStore *>(&dp_->optimizer().state());
  if (const auto *data_parallel = dynamic_cast<const DataParallel *>(dp_.get())) {
    telemetry.params = data_parallel->param_partition();
    telemetry.compression = data_parallel->compression_totals();
    telemetry.momentum_exchange = data_parallel->momentum_exchange();
    if (const Fp32Params *fp32 = data_parallel->fp32_params())
      telemetry.fp32_parameters = fp32->size();
  }
  telemetry.tp_rank = groups_.coord.tp;
  telemetry.pp_rank = groups_.coord.pp;
  telemetry_ = std::make_unique<Telemetry>(std::move(telemetry));
  TrainingStateView state;
  state.config = &config_;
  state.env = env_;
  state.spec = &model_->spec();
  state.decls = &model_->params().decls();
  state.whole_decls = &whole_decls_;
  state.num_parameters = CountParameters(spec);
  state.local_parameters = model_->params().size();
  const std::string tied_name = TiedWeightName(spec);  // the last stage's copy is not saved
  if (plan_ && !tied_name.empty() && groups_.coord.pp == config_.pp_size - 1)
    state.not_saved.push_back(tied_name);
  if (groups_.coord.tp > 0)  // tp rank 0 saves the tensors every tp rank holds whole
    for (const ParamDecl &d : model_->params().decls())
      if (!d.split.split()) state.not_saved.push_back(d.name);
  state.dp_rank = groups_.coord.dp;
  state.pp_size = config_.pp_size;
  state.dp = dp_.get();
  state.progress = &progress_;
  state.scaler = &scaler_;
  state.store = store_.get();
  state.comm_timeout = CommTimeout();
  state.next_lr = [this] { return NextLearningRate(); };
  checkpoints_ = std::make_unique<CheckpointCoordinator>(std::move(state));
  memory_.ResetPeaks();  // e.g. the fp32 activation buffers 16-bit storage replaced
}

// The link to the other stages, the tied weight's copies, and which stage
// answers for each tensor (the first holding it).
void Engine::SetUpPipeline(const ActivationLimits &limits) {
  const int64_t p = plan_->stages, pp_rank = groups_.coord.pp;
  std::vector<ChunkShape> shapes;
  // Stages exchange BoundaryRows rows (this rank's share under sequence
  // parallelism); a boundary inside a tensor-parallel region carries every
  // row, i.e. row_split times the elements per boundary row.
  const int64_t split = model_->row_split();
  for (size_t c = 0; c < model_->num_chunks(); ++c) {
    const LayerRange r = model_->chunk(c);
    shapes.push_back({model_->InWidth(r.begin) * model_->InRows(r.begin, split),
                      model_->layers()[r.end - 1]->OutWidth() * model_->OutRows(r.end - 1, split)});
  }
  link_ = std::make_unique<StageLink>(groups_.pp_p2p.get(), groups_.pp.get(), std::move(shapes),
                                      (limits.max_rows() + split - 1) / split, &memory_,
                                      device_ ? device_->placement() : StepPlacement{});
  for (int64_t r = p - 1; r >= 0; --r) {  // the lowest rank holding a tensor answers for it
    const std::vector<ParamDecl> held = DeclarePartParameters(model_->spec(), plan_->ChunksOf(r));
    for (size_t k = 0; k < whole_decls_.size(); ++k)
      for (const ParamDecl &d : held)
        if (d.name == whole_decls_[k].name) holder_[k] = r;
  }
  int tied = -1;
  const std::string tied_name = TiedWeightName(model_->spec());
  if (!tied_name.empty() && (pp_rank == 0 || pp_rank == p - 1))
    tied = model_->params().Find(tied_name);
  const int64_t numel = tied >= 0 ? model_->params().decls()[size_t(tied)].numel : 0;
  tied_ = std::make_unique<TiedWeights>(groups_.pp_p2p.get(), tied, numel, pp_rank == 0 ? p - 1 : 0,
                                        &memory_, device_ ? device_->memory() : nullptr);
  executor_->SetPipeline(link_.get(), tied_.get());
}

std::chrono::milliseconds Engine::CommTimeout() const {
  return CommTimeoutOf(config_);
}

// Every rank says it is done with collectives, and waits (briefly) until the
// others are too or have gone, before any rank closes its connections: a rank
// that finishes the last collective first and exits at once could otherwise
// close a socket while a slower peer is still reading that collective's last
// message, and the peer would fail with "connection closed". Skipped after a
// failed step: the job is ending in an error anyway.
void Engine::QuiesceBeforeClose() {
  if (!store_ || failed_ || env_.world_size < 2) return;
  constexpr const char *kClosingKey = "__dstrain/closing/";
  if (!store_->Set(kClosingKey + std::to_string(env_.rank), {1}).ok()) return;
  const auto deadline =
      std::chrono::steady_clock::now() + std::min(CommTimeout(), std::chrono::milliseconds(30000));
  for (int64_t r = 0; r < env_.world_size; ++r) {
    if (r == env_.rank) continue;
    while (std::chrono::steady_clock::now() < deadline) {
      if (store_->Get(kClosingKey + std::to_string(r), std::chrono::milliseconds(200)).ok()) break;
      if (store_->Get(kDoneKey + std::to_string(r), std::chrono::milliseconds(1)).ok()) break;
    }
  }
}

// The communicator's worker thread goes first, then the store it used.
Engine::~Engine() {
  telemetry_->StopMonitor();  // its HTTP threads read the store (rank 0's job table)
  QuiesceBeforeClose();
  dp_.reset();
  // The p2p group first: it joins the threads that wait in Gloo for posted
  // sends and receives (a stalled peer's ends at the timeout), so no Gloo
  // wait outlives the link's and the tied weights' buffers.
  groups_.pp_p2p.reset();
  link_.reset();
  tied_.reset();
  groups_.pp.reset();
  groups_.tp.reset();
  groups_.dp.reset();
  heartbeat_.reset();
  // After a failure rank 0 keeps the store up only briefly for the other
  // survivors: a stalled rank would never say it finished.
  if (store_ && !aborted_)
    FinishJob(*store_, env_.rank, env_.world_size,
              failed_ ? std::min(CommTimeout(), std::chrono::milliseconds(1000)) : CommTimeout());
  store_.reset();
}

// Nothing here waits for a peer: the communicator's worker is idle (calls on
// an engine never overlap), so it stops at once, and closing the Gloo context
// drops the connections; the store connection closes without the "finished"
// round trip (the server, on rank 0, stops in the destructor).
void Engine::Abort() {
  abort_->Raise();  // the groups close their connections as they go
  failed_ = true;
  aborted_ = true;
  telemetry_->StopMonitor();
  dp_.reset();
  groups_.pp_p2p.reset();  // before the buffers its waits may still use
  link_.reset();
  tied_.reset();
  groups_.pp.reset();
  groups_.tp.reset();
  groups_.dp.reset();
  heartbeat_.reset();  // its last beat says "aborted"
  // Rank 0 hosts the store: it stays up briefly so that the peers whose
  // operations just failed on the closed connections can read why (the
  // aborted beat) instead of finding the store gone.
  if (store_ && env_.rank == 0 && env_.world_size > 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (store_) store_->Abort();
}

EngineInfo Engine::Info() const {
  const ModelSpec &spec = model_->spec();
  const bool gpt = spec.IsLanguageModel();
  EngineInfo info{};
  info.model_type = spec.type;
  info.loss = spec.loss;
  info.num_parameters = CountParameters(spec);
  info.train_batch_size = config_.train_batch_size;
  info.micro_batch_size = config_.train_micro_batch_size_per_gpu;
  info.grad_accum_steps = config_.gradient_accumulation_steps;
  info.dp_size = config_.dp_size;
  info.rank = env_.rank;
  info.world_size = env_.world_size;
  info.seq_len = gpt ? spec.lm.n_ctx : 0;
  info.vocab_size = gpt ? spec.lm.vocab : 0;
  info.input_dim = gpt ? 0 : spec.input_dim;
  info.output_dim = gpt ? spec.lm.vocab : spec.SequentialOutputDim();
  info.dp_rank = groups_.coord.dp;
  info.pp_size = config_.pp_size;
  info.pp_rank = groups_.coord.pp;
  info.tp_size = config_.tp_size;
  info.tp_rank = groups_.coord.tp;
  return info;
}

double Engine::NextLearningRate() const {
  return executor_->NextLearningRate();
}

// ---------------------------------------------------------------- batches

// ---------------------------------------------------------------- execution

Status Engine::RunAndNoteFailure(const std::vector<Instruction> &program, const BatchView &batch,
                                 double *mean_loss) {
  StepRecord record;
  Status st = executor_->Run(program, batch, &record);
  if (!st.ok()) {
    profiler_->EndStep(nullptr);
    failed_ = true;
    return st;
  }
  *mean_loss = record.loss;
  return Status::Ok();
}

Result<const std::vector<Instruction> *> Engine::Program(Op kind, int64_t micro_batches) {
  auto key = std::make_pair(static_cast<int>(kind), micro_batches);
  auto it = programs_.find(key);
  if (it != programs_.end()) return &it->second;
  std::vector<Instruction> program;
  if (plan_) {
    Result<std::vector<std::vector<PipeAction>>> actions = plan_->Actions(micro_batches);
    if (!actions.ok()) return actions.status();
    const ProgramKind what = kind == Op::kOptimizerStep ? ProgramKind::kTrain
                             : kind == Op::kBackward    ? ProgramKind::kForwardBackward
                                                        : ProgramKind::kEval;
    program = PipelineProgram(actions.value()[size_t(groups_.coord.pp)], what);
  } else if (kind == Op::kOptimizerStep)
    program = TrainSchedule(micro_batches);
  else if (kind == Op::kBackward)
    program = ForwardBackwardSchedule(micro_batches);
  else
    program = EvalSchedule(micro_batches);
  DST_RETURN_IF_ERROR(PrepareProgram(&program, micro_batches, model_->activation_slots()));
  return &programs_.emplace(key, std::move(program)).first->second;
}

Status Engine::RunProgram(Op kind, const BatchView &batch, const char *call, bool exact_train,
                          float *loss) {
  Result<int64_t> micro = CheckBatch(batch, model_->spec(), config_.train_micro_batch_size_per_gpu,
                                     config_.gradient_accumulation_steps, call, exact_train,
                                     config_.sequence_parallel ? config_.tp_size : 1);
  if (!micro.ok()) return micro.status();
  if (heartbeat_) heartbeat_->SetProgress(progress_.steps);
  Result<const std::vector<Instruction> *> program = Program(kind, micro.value());
  if (!program.ok()) return program.status();
  if (kind == Op::kOptimizerStep) {
    profiler_->BeginStep(progress_.steps);
    if (injected_slowness_ > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(injected_slowness_));
  }
  double mean = 0;
  Status ran = RunAndNoteFailure(*program.value(), batch, &mean);
  if (device_) {  // also after a failure: the collectives it left are waited for
    Status device = device_->TakeStatus();
    if (ran.ok() && !device.ok()) ran = device.context(call);
  }
  DST_RETURN_IF_ERROR(ran);
  if (loss) *loss = float(mean);
  return Status::Ok();
}

Status Engine::TrainBatch(const BatchView &batch, float *loss) {
  return RunProgram(Op::kOptimizerStep, batch, "train_batch", true, loss);
}

Status Engine::EvalBatch(const BatchView &batch, float *loss) {
  return RunProgram(Op::kForward, batch, "eval_batch", false, loss);
}

Status Engine::ForwardBackward(const BatchView &batch, float *loss) {
  return RunProgram(Op::kBackward, batch, "forward_backward", false, loss);
}

// ---------------------------------------------------------------- parameters

Status Engine::FindParam(const std::string &name, const char *call, size_t count, int *whole,
                         int *local) const {
  int k = -1;
  for (size_t i = 0; i < whole_decls_.size() && k < 0; ++i)
    if (whole_decls_[i].name == name) k = int(i);
  if (k < 0)
    return InvalidArgument(std::string(call) + ": no parameter named \"" + name +
                           "\"; list them with dst_engine_param_info");
  const int64_t numel = whole_decls_[size_t(k)].numel;
  if (int64_t(count) != numel)
    return InvalidArgument(std::string(call) + ": \"" + name + "\" has " + std::to_string(numel) +
                           " elements but the buffer holds " + std::to_string(count));
  *whole = k;
  *local = model_->params().Find(name);
  return Status::Ok();
}

Status Engine::ShareOverStages(int whole, float *data) const {
  if (!plan_) return Status::Ok();
  return groups_.pp->Broadcast(data, whole_decls_[size_t(whole)].numel, holder_[size_t(whole)])
      ->Wait();
}

// Tensor `id` (this rank's slice under tensor parallelism) read by `read`
// into the global tensor `data`: whole here, or gathered over the tp group.
template <typename Read>
Status Engine::ReadGlobal(int id, float *data, Read read) const {
  const ParamDecl &decl = model_->params().decls()[size_t(id)];
  if (!decl.split.sliced()) return read(id, data);
  std::vector<float> local(size_t(decl.numel));
  DST_RETURN_IF_ERROR(read(id, local.data()));
  const TensorParallelGroup tp{groups_.tp.get(), config_.tp_size, groups_.coord.tp};
  return GatherTensor(tp, decl, local.data(), data);
}

Status Engine::GetParam(const std::string &name, float *data, size_t count) const {
  int whole = 0, id = 0;
  DST_RETURN_IF_ERROR(FindParam(name, "get_param", count, &whole, &id));
  Status st;
  if (groups_.coord.pp == holder_[size_t(whole)])
    st = ReadGlobal(id, data, [this](int k, float *out) { return dp_->ReadParam(k, out); });
  if (st.ok()) st = ShareOverStages(whole, data);
  return st.context("get_param \"" + name + "\"");
}

Status Engine::SetParam(const std::string &name, const float *data, size_t count) {
  int whole = 0, id = 0;
  DST_RETURN_IF_ERROR(FindParam(name, "set_param", count, &whole, &id));
  if (id < 0) return Status::Ok();  // another stage holds it (every copy is written)
  const ParamDecl &decl = model_->params().decls()[size_t(id)];
  std::vector<float> slice;
  if (decl.split
          .sliced()) {  // this tp rank's part of the global tensor (padded: without the padding)
    slice.resize(size_t(decl.numel));
    SliceTensor(decl, data, slice.data());
    data = slice.data();
  }
  Status st = dp_->WriteParam(id, data);
  return st.context("set_param \"" + name + "\"");
}

Status Engine::GetGrad(const std::string &name, float *data, size_t count) const {
  int whole = 0, id = 0;
  DST_RETURN_IF_ERROR(FindParam(name, "get_grad", count, &whole, &id));
  Status st;
  if (groups_.coord.pp == holder_[size_t(whole)])
    st = ReadGlobal(id, data, [this](int k, float *out) { return dp_->ReadGrad(k, out); });
  // Every stage joins the broadcast, even after the holder's error (it
  // sends what it has), so nobody waits: the holder's error is returned.
  Status shared = ShareOverStages(whole, data);
  return st.ok() ? shared : st;
}

// ---------------------------------------------------------------- checkpoints

Status Engine::SaveCheckpoint(const std::string &dir, const std::string &tag,
                              const std::string &client_state_json) {
  return checkpoints_->Save(dir, tag, client_state_json);
}

Status Engine::LoadCheckpoint(const std::string &dir, const std::string &tag,
                              std::string *client_state_json) {
  return checkpoints_->Load(dir, tag, client_state_json);
}

Status Engine::LoadWeights(const std::string &dir, const std::string &tag) {
  return checkpoints_->LoadWeights(dir, tag);
}

// ---------------------------------------------------------------- metrics

nlohmann::json Engine::CommJson() const {
  return telemetry_->CommJson();
}

std::string Engine::MemoryStatusJson() const {
  return telemetry_->MemoryStatusJson().dump();
}

std::string Engine::MetricsJson() const {
  return telemetry_->MetricsJson({&progress_, NextLearningRate(), scaler_.scale()});
}

std::string Engine::MonitorUrl() const {
  return telemetry_->MonitorUrl();
}

Status Engine::OnStep(const StepRecord &record) {
  profiler_->EndStep(&record);
  if (straggler_) DST_RETURN_IF_ERROR(CheckStragglers());
  return telemetry_->OnStep(record, progress_, scaler_.scale());
}

// communication.slow_node_tolerance: the step's compute into the window; at
// a window's end every rank learns the verdict and rank 0 names the slow ones.
Status Engine::CheckStragglers() {
  StragglerState state;
  state.compute_seconds = profiler_->step_compute_seconds() + injected_slowness_;
  Result<StragglerVerdict> verdict = straggler_->OnStep(state.compute_seconds);
  if (!verdict.ok()) return verdict.status();
  const StragglerVerdict &v = verdict.value().checked ? verdict.value() : straggler_->last();
  state.slow = v.this_rank_slow;
  nlohmann::json slow = nlohmann::json::array();
  for (const StragglerReport &r : v.slow) {
    if (r.rank == env_.rank) state.slower_by = r.slower_by;
    slow.push_back({{"rank", r.rank},
                    {"host", r.host},
                    {"compute_seconds", r.compute_seconds},
                    {"slower_by", r.slower_by}});
  }
  if (v.checked) state.last_check = {{"median_seconds", v.median_seconds}, {"slow_ranks", slow}};
  if (verdict.value().checked && env_.rank == 0)
    for (const StragglerReport &r : v.slow) {
      char line[320];
      std::snprintf(line, sizeof line,
                    "rank %lld on %s is %.0f%% slower than the median: %.1f vs %.1f ms of compute "
                    "per step over the last %lld steps (tolerance %.0f%%)",
                    static_cast<long long>(r.rank), r.host.c_str(), r.slower_by * 100,
                    r.compute_seconds * 1e3, v.median_seconds * 1e3,
                    static_cast<long long>(config_.steps_per_print),
                    config_.communication.slow_node_tolerance * 100);
      Log(LogLevel::kWarning, "straggler", line);
    }
  telemetry_->SetStraggler(std::move(state));
  return Status::Ok();
}

}  // namespace dst
