#include "core/engine/engine.h"

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/comm/gloo_communicator.h"
#include "core/optim/clip.h"
#include "core/optim/lr_schedule.h"
#include "core/runtime/threads.h"
#include "core/zero/data_parallel.h"
#include "core/zero/mixed_parallel.h"
#include "metrics/monitor.h"

namespace dst {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Result<std::string> ReadWholeFile(const std::string &path, const char *what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return IoError(std::string("cannot read the ") + what + " file " + path + ": " +
                   std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Exactly one of text/path must be given; returns the text.
Result<std::string> TextOrFile(const std::string &text, const std::string &path, const char *what) {
  if (!text.empty() && !path.empty())
    return InvalidArgument(std::string("both a ") + what + " JSON string and a " + what +
                           " path were given; pass exactly one");
  if (text.empty() && path.empty())
    return InvalidArgument(std::string("no ") + what + " given; pass a " + what +
                           " JSON string or a path to one");
  if (!text.empty()) return text;
  return ReadWholeFile(path, what);
}

}  // namespace

// ---------------------------------------------------------------- creation

namespace {

std::chrono::milliseconds CommTimeout(const Config &config) {
  return std::chrono::milliseconds(int64_t(config.runtime.comm_timeout_seconds * 1000.0));
}

// Joins the job: the rendezvous store (rank 0 hosts it), a check that every
// rank parsed the same config, and the data-parallel group.
Status ConnectJob(const LaunchEnv &env, const Config &config, const std::string &config_text,
                  std::unique_ptr<Store> *store, std::unique_ptr<Communicator> *dp) {
  if (env.world_size == 1) {
    *dp = MakeSoloCommunicator("dp");
    return Status::Ok();
  }
  TcpStoreOptions store_options;
  store_options.host = env.master_addr;
  store_options.port = env.master_port;
  store_options.is_server = env.rank == 0;
  store_options.rank = env.rank;
  store_options.world_size = env.world_size;
  store_options.job_token = env.job_token;
  store_options.timeout = CommTimeout(config);
  Result<std::unique_ptr<Store>> connected = ConnectTcpStore(store_options);
  if (!connected.ok()) return connected.status();
  *store = std::move(connected).value();
  DST_RETURN_IF_ERROR(
      CheckSameConfig(**store, env.rank, env.world_size, config_text, CommTimeout(config)));
  GlooOptions gloo;
  gloo.name = "dp";
  gloo.rank = env.rank;  // pure data parallelism: the DP group is the world
  gloo.size = env.world_size;
  const char *bind = std::getenv("DSTRAIN_BIND_ADDR");
  gloo.bind_host = bind ? bind : "";
  gloo.master_addr = env.master_addr;
  gloo.timeout = CommTimeout(config);
  Result<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(**store, gloo);
  if (!comm.ok()) return comm.status();
  *dp = std::move(comm).value();
  return Status::Ok();
}

// Fault injection for tests of the overflow path (documented in the README):
// DSTRAIN_INJECT_GRAD_OVERFLOW="R:S[,R:S...]" makes rank R's gradients
// infinite in step S (counted from 0), as an fp16 overflow would.
Result<std::vector<int64_t>> ParseOverflowInjection(int64_t rank) {
  std::vector<int64_t> steps;
  const char *text = std::getenv("DSTRAIN_INJECT_GRAD_OVERFLOW");
  if (text == nullptr || *text == '\0') return steps;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    long long r = -1, s = -1;
    char colon = 0;
    std::stringstream pair(item);
    if (!(pair >> r >> colon >> s) || colon != ':' || r < 0 || s < 0 || !pair.eof())
      return InvalidArgument("DSTRAIN_INJECT_GRAD_OVERFLOW=\"" + std::string(text) +
                             "\": expected rank:step pairs separated by commas, e.g. \"1:3\"");
    if (r == rank) steps.push_back(s);
  }
  return steps;
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions &options) {
  Result<std::string> config_text = TextOrFile(options.config_text, options.config_path, "config");
  if (!config_text.ok()) return config_text.status();
  Result<std::string> model_text = TextOrFile(options.model_text, options.model_path, "model");
  if (!model_text.ok()) return model_text.status();
  Result<LaunchEnv> env = DetectLaunchEnv();
  if (!env.ok()) return env.status();

  ConfigContext context;
  context.world_size = env.value().world_size;
  context.total_steps = options.total_steps;
  Result<Config> config = ParseConfig(config_text.value(), context);
  if (!config.ok()) return config.status();
  Result<ModelSpec> spec = ParseModelSpec(model_text.value());
  if (!spec.ok()) return spec.status();

  std::unique_ptr<Store> store;
  std::unique_ptr<Communicator> dp;
  DST_RETURN_IF_ERROR(ConnectJob(env.value(), config.value(),
                                 config.value().resolved_json + spec.value().canonical_json, &store,
                                 &dp));
  std::unique_ptr<Engine> engine(new Engine(std::move(config).value(), std::move(spec).value(),
                                            std::move(env).value(), std::move(store),
                                            std::move(dp)));
  Result<std::vector<int64_t>> inject = ParseOverflowInjection(engine->env_.rank);
  if (!inject.ok()) return inject.status();
  engine->inject_overflow_at_ = std::move(inject).value();
  DST_RETURN_IF_ERROR(engine->StartMonitor());
  return engine;
}

Engine::Engine(Config config, ModelSpec spec, LaunchEnv env, std::unique_ptr<Store> store,
               std::unique_ptr<Communicator> dp_comm)
    : config_(std::move(config)),
      env_(std::move(env)),
      store_(std::move(store)),
      dp_comm_(std::move(dp_comm)),
      scaler_(config_.fp16) {
  SetNumThreads(ResolveNumThreads(config_.runtime.num_threads));
  dp_comm_->SetCompletionHook([this](const CommRecord &r) { comm_stats_.Record(r); });
  ActivationLimits limits;
  limits.max_B = config_.train_micro_batch_size_per_gpu;
  limits.max_T = spec.type == ModelSpec::Type::kGpt ? spec.gpt.n_ctx : 1;
  limits.max_threads = MaxThreads();
  const bool mixed = config_.precision() != DType::kFloat32;
  model_ = std::make_unique<Model<float>>(
      spec, limits, &memory_,
      mixed ? StoreOptionsForMixedPrecision(dp_comm_->size())
            : StoreOptionsForStage(config_.zero.stage, dp_comm_->size()));
  if (mixed) {
    dp_ = std::make_unique<MixedPrecisionParallel>(config_, model_.get(), dp_comm_.get(), &memory_);
    model_->StoreActivationsIn16Bits(
        config_.precision() == DType::kFloat16 ? Half::kFp16 : Half::kBf16, &memory_);
  } else
    dp_ = std::make_unique<DataParallel>(config_, model_.get(), dp_comm_.get(), &memory_);
  const int64_t T = limits.max_T;
  flops_per_sample_token_ = 3.0 * model_->ForwardFlops(1, T) / double(T);
  memory_.ResetPeaks();  // e.g. the fp32 activation buffers 16-bit storage replaced
}

std::chrono::milliseconds Engine::CommTimeout() const {
  return dst::CommTimeout(config_);
}

Status Engine::RunAndNoteFailure(const std::vector<Instruction> &program, const BatchView &batch,
                                 double *mean_loss) {
  Status st = Run(program, batch, mean_loss);
  if (!st.ok()) failed_ = true;
  return st;
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
  monitor_.reset();  // its HTTP threads read the store (rank 0's job table)
  QuiesceBeforeClose();
  dp_.reset();
  dp_comm_.reset();
  if (store_ && !aborted_) FinishJob(*store_, env_.rank, env_.world_size, CommTimeout());
  store_.reset();
}

// Nothing here waits for a peer: the communicator's worker is idle (calls on
// an engine never overlap), so it stops at once, and closing the Gloo context
// drops the connections; the store connection closes without the "finished"
// round trip (the server, on rank 0, stops in the destructor).
void Engine::Abort() {
  failed_ = true;
  aborted_ = true;
  monitor_.reset();
  dp_.reset();
  dp_comm_.reset();
  if (store_) store_->Abort();
}

EngineInfo Engine::Info() const {
  const ModelSpec &spec = model_->spec();
  const bool gpt = spec.type == ModelSpec::Type::kGpt;
  EngineInfo info{};
  info.model_type = spec.type;
  info.loss = spec.loss;
  info.num_parameters = model_->params().size();
  info.train_batch_size = config_.train_batch_size;
  info.micro_batch_size = config_.train_micro_batch_size_per_gpu;
  info.grad_accum_steps = config_.gradient_accumulation_steps;
  info.dp_size = config_.dp_size;
  info.rank = env_.rank;
  info.world_size = env_.world_size;
  info.seq_len = gpt ? spec.gpt.n_ctx : 0;
  info.vocab_size = gpt ? spec.gpt.vocab : 0;
  info.input_dim = gpt ? 0 : spec.input_dim;
  info.output_dim = gpt ? spec.gpt.vocab : spec.SequentialOutputDim();
  return info;
}

double Engine::NextLearningRate() const {
  // DeepSpeed does not advance the schedule on a step skipped for overflow.
  return LearningRateAt(config_.scheduler, config_.optimizer.lr, steps_ - skipped_steps_);
}

// ---------------------------------------------------------------- batches

Status Engine::CheckTokenRange(const int32_t *ids, size_t count, int64_t limit, bool allow_ignore,
                               const char *what, const char *call) const {
  for (size_t i = 0; i < count; ++i) {
    const int32_t id = ids[i];
    if ((id >= 0 && id < limit) || (allow_ignore && id == -1)) continue;
    return InvalidArgument(std::string(call) + ": " + what + "[" + std::to_string(i) + "] = " +
                           std::to_string(id) + " is outside [0, " + std::to_string(limit) + ")" +
                           (allow_ignore ? " (or -1 to ignore)" : ""));
  }
  return Status::Ok();
}

namespace {
Status CheckCount(const char *call, const char *name, const void *ptr, size_t given,
                  size_t expected, const char *formula) {
  if (!ptr)
    return InvalidArgument(std::string(call) + ": batch." + name + " is NULL; this model needs " +
                           std::string(formula) + " = " + std::to_string(expected) + " values");
  if (given != expected)
    return InvalidArgument(std::string(call) + ": batch." + name + "_count is " +
                           std::to_string(given) + " but " + std::string(formula) + " = " +
                           std::to_string(expected));
  return Status::Ok();
}
}  // namespace

Result<int64_t> Engine::CheckBatch(const BatchView &b, const char *call, bool exact_train) const {
  const int64_t micro = config_.train_micro_batch_size_per_gpu;
  const int64_t accum = config_.gradient_accumulation_steps;
  const int64_t n = int64_t(b.n_samples);
  if (exact_train && n != micro * accum)
    return InvalidArgument(
        std::string(call) + ": n_samples is " + std::to_string(n) +
        " but one optimizer step on this rank takes train_micro_batch_size_per_gpu " +
        std::to_string(micro) + " x gradient_accumulation_steps " + std::to_string(accum) + " = " +
        std::to_string(micro * accum));
  if (!exact_train && (n <= 0 || n % micro != 0))
    return InvalidArgument(std::string(call) + ": n_samples is " + std::to_string(n) +
                           "; it must be a positive multiple of train_micro_batch_size_per_gpu " +
                           std::to_string(micro));
  const ModelSpec &spec = model_->spec();
  if (spec.type == ModelSpec::Type::kGpt) {
    const int64_t T = int64_t(b.seq_len);
    if (T < 1 || T > spec.gpt.n_ctx)
      return InvalidArgument(std::string(call) + ": seq_len is " + std::to_string(T) +
                             "; it must be in [1, n_ctx = " + std::to_string(spec.gpt.n_ctx) + "]");
    const size_t want = size_t(n * T);
    const char *formula = "n_samples x seq_len";
    DST_RETURN_IF_ERROR(CheckCount(call, "tokens", b.tokens, b.tokens_count, want, formula));
    DST_RETURN_IF_ERROR(CheckCount(call, "targets", b.targets, b.targets_count, want, formula));
    DST_RETURN_IF_ERROR(CheckTokenRange(b.tokens, want, spec.gpt.vocab, false, "tokens", call));
    DST_RETURN_IF_ERROR(CheckTokenRange(b.targets, want, spec.gpt.vocab, true, "targets", call));
  } else {
    DST_RETURN_IF_ERROR(CheckCount(call, "inputs", b.inputs, b.inputs_count,
                                   size_t(n * spec.input_dim), "n_samples x input_dim"));
    const int64_t out = spec.SequentialOutputDim();
    if (spec.loss == ModelSpec::Loss::kMse) {
      DST_RETURN_IF_ERROR(CheckCount(call, "labels", b.labels, b.labels_count, size_t(n * out),
                                     "n_samples x output_dim"));
    } else {
      DST_RETURN_IF_ERROR(
          CheckCount(call, "targets", b.targets, b.targets_count, size_t(n), "n_samples"));
      DST_RETURN_IF_ERROR(CheckTokenRange(b.targets, size_t(n), out, true, "targets", call));
    }
  }
  return n / micro;
}

MicroBatch<float> Engine::MicroBatchAt(const BatchView &b, int64_t index) const {
  const ModelSpec &spec = model_->spec();
  MicroBatch<float> mb;
  mb.B = config_.train_micro_batch_size_per_gpu;
  const int64_t first = index * mb.B;
  if (spec.type == ModelSpec::Type::kGpt) {
    mb.seq = int64_t(b.seq_len);
    mb.tokens = b.tokens + first * mb.seq;
    mb.targets = b.targets + first * mb.seq;
  } else {
    mb.seq = 1;
    mb.inputs = b.inputs + first * spec.input_dim;
    if (b.labels) mb.labels = b.labels + first * spec.SequentialOutputDim();
    if (b.targets) mb.targets = b.targets + first;
  }
  return mb;
}

// ---------------------------------------------------------------- execution

Status Engine::Run(const std::vector<Instruction> &program, const BatchView &batch,
                   double *mean_loss) {
  int64_t micro_batches = 0;
  for (const Instruction &ins : program) micro_batches += ins.op == Op::kForward;
  // fp16: the loss is scaled up before backward (scaler_.scale() is 1 otherwise).
  const float grad_scale = float(scaler_.scale()) / float(micro_batches);
  dp_->SetLossScale(scaler_.scale());
  const bool inject_overflow = std::find(inject_overflow_at_.begin(), inject_overflow_at_.end(),
                                         steps_) != inject_overflow_at_.end();
  StepRecord rec;
  const auto step_start = Clock::now();
  double loss_sum = 0;
  MicroBatch<float> mb;
  for (const Instruction &ins : program) {
    const auto t0 = Clock::now();
    switch (ins.op) {
      case Op::kZeroGradients: {
        Status st = dp_->ZeroGradients();
        if (!st.ok()) return st.context("zeroing gradients at step " + std::to_string(steps_));
        break;
      }
      case Op::kForward: {
        mb = MicroBatchAt(batch, ins.micro_batch);
        mb.grad_scale = grad_scale;
        if (inject_overflow && ins.micro_batch == micro_batches - 1)
          mb.grad_scale = std::numeric_limits<float>::infinity();
        // Buckets may start during the last micro-batch's backward only.
        dp_->BeginMicroBatch(ins.micro_batch == micro_batches - 1);
        loss_sum += model_->Forward(mb, dp_.get());
        Status st = dp_->TakeHookStatus();
        if (!st.ok()) return st.context("forward at step " + std::to_string(steps_));
        rec.phases.forward += SecondsSince(t0);
        break;
      }
      case Op::kBackward: {
        model_->Backward(mb, dp_.get());
        Status st = dp_->TakeHookStatus();
        if (!st.ok()) return st.context("backward at step " + std::to_string(steps_));
        rec.phases.backward += SecondsSince(t0);
        break;
      }
      case Op::kReduceGradients: {
        Status st = dp_->FinishReduction();
        if (st.ok() && program.back().op != Op::kOptimizerStep) st = dp_->GatherGradients();
        if (!st.ok()) return st.context("reducing gradients at step " + std::to_string(steps_));
        rec.phases.reduce += SecondsSince(t0);
        break;
      }
      case Op::kClipGradients: {
        Result<double> norm = dp_->GradNorm();
        if (!norm.ok()) return norm.status();
        rec.grad_norm = norm.value();
        Result<double> global_loss = dp_->Average(loss_sum);
        if (!global_loss.ok()) return global_loss.status();
        if (!std::isfinite(rec.grad_norm) || !std::isfinite(global_loss.value())) {
          if (scaler_.enabled()) {  // fp16 overflow: every rank skips this step
            rec.skipped = true;
            ++skipped_steps_;
            Status st = scaler_.Update(/*overflow=*/true);
            if (!st.ok()) return st.context("train_batch at step " + std::to_string(steps_));
            rec.phases.step += SecondsSince(t0);
            break;
          }
          return Status(Code::kNumeric,
                        "train_batch: the loss or the gradients are not finite at step " +
                            std::to_string(steps_) + " (loss " + std::to_string(loss_sum) +
                            ", gradient norm " + std::to_string(rec.grad_norm) +
                            "); the step was skipped and the weights are unchanged. Lower the "
                            "learning rate or set gradient_clipping");
        }
        if (config_.gradient_clipping > 0) {
          const double coef = config_.gradient_clipping / (rec.grad_norm + 1e-6);
          if (coef < 1.0) dp_->ScaleGradients(float(coef));
        }
        rec.phases.step += SecondsSince(t0);
        break;
      }
      case Op::kOptimizerStep: {
        rec.lr = NextLearningRate();
        if (!rec.skipped) {
          DST_RETURN_IF_ERROR(dp_->Step(rec.lr));
          DST_RETURN_IF_ERROR(scaler_.Update(/*overflow=*/false));
        }
        ++steps_;  // DeepSpeed's global_steps counts skipped steps too
        rec.phases.step += SecondsSince(t0);
        break;
      }
    }
  }
  Result<double> mean = dp_->Average(loss_sum / double(micro_batches));
  if (!mean.ok()) return mean.status();
  *mean_loss = mean.value();
  rec.loss = *mean_loss;
  rec.seconds = SecondsSince(step_start);
  rec.phases.total = rec.seconds;
  rec.micro_batches = micro_batches;
  rec.samples = int64_t(batch.n_samples) * dp_comm_->size();
  rec.tokens =
      rec.samples * (model_->spec().type == ModelSpec::Type::kGpt ? int64_t(batch.seq_len) : 1);
  if (program.back().op == Op::kOptimizerStep) {
    last_ = rec;
    total_times_.forward += rec.phases.forward;
    total_times_.backward += rec.phases.backward;
    total_times_.reduce += rec.phases.reduce;
    total_times_.step += rec.phases.step;
    total_times_.total += rec.phases.total;
    total_samples_ += rec.samples;
    total_tokens_ += rec.tokens;
  }
  return Status::Ok();
}

const std::vector<Instruction> &Engine::Program(Op kind, int64_t micro_batches) {
  auto key = std::make_pair(static_cast<int>(kind), micro_batches);
  auto it = programs_.find(key);
  if (it != programs_.end()) return it->second;
  std::vector<Instruction> program;
  if (kind == Op::kOptimizerStep)
    program = TrainSchedule(micro_batches);
  else if (kind == Op::kBackward)
    program = ForwardBackwardSchedule(micro_batches);
  else
    program = EvalSchedule(micro_batches);
  return programs_.emplace(key, std::move(program)).first->second;
}

Status Engine::TrainBatch(const BatchView &batch, float *loss) {
  Result<int64_t> micro = CheckBatch(batch, "train_batch", true);
  if (!micro.ok()) return micro.status();
  double mean = 0;
  DST_RETURN_IF_ERROR(RunAndNoteFailure(Program(Op::kOptimizerStep, micro.value()), batch, &mean));
  if (loss) *loss = float(mean);
  return RecordStep();
}

Status Engine::EvalBatch(const BatchView &batch, float *loss) {
  Result<int64_t> micro = CheckBatch(batch, "eval_batch", false);
  if (!micro.ok()) return micro.status();
  double mean = 0;
  DST_RETURN_IF_ERROR(RunAndNoteFailure(Program(Op::kForward, micro.value()), batch, &mean));
  if (loss) *loss = float(mean);
  return Status::Ok();
}

Status Engine::ForwardBackward(const BatchView &batch, float *loss) {
  Result<int64_t> micro = CheckBatch(batch, "forward_backward", false);
  if (!micro.ok()) return micro.status();
  double mean = 0;
  DST_RETURN_IF_ERROR(RunAndNoteFailure(Program(Op::kBackward, micro.value()), batch, &mean));
  if (loss) *loss = float(mean);
  return Status::Ok();
}

// ---------------------------------------------------------------- parameters

Status Engine::FindParam(const std::string &name, const char *call, size_t count, int *id) const {
  const int k = model_->params().Find(name);
  if (k < 0)
    return InvalidArgument(std::string(call) + ": no parameter named \"" + name +
                           "\"; list them with dst_engine_param_info");
  const int64_t numel = model_->params().decls()[k].numel;
  if (int64_t(count) != numel)
    return InvalidArgument(std::string(call) + ": \"" + name + "\" has " + std::to_string(numel) +
                           " elements but the buffer holds " + std::to_string(count));
  *id = k;
  return Status::Ok();
}

Status Engine::GetParam(const std::string &name, float *data, size_t count) const {
  int id = 0;
  DST_RETURN_IF_ERROR(FindParam(name, "get_param", count, &id));
  Status st = dp_->ReadParam(id, data);
  return st.context("get_param \"" + name + "\"");
}

Status Engine::SetParam(const std::string &name, const float *data, size_t count) {
  int id = 0;
  DST_RETURN_IF_ERROR(FindParam(name, "set_param", count, &id));
  Status st = dp_->WriteParam(id, data);
  return st.context("set_param \"" + name + "\"");
}

Status Engine::GetGrad(const std::string &name, float *data, size_t count) const {
  int id = 0;
  DST_RETURN_IF_ERROR(FindParam(name, "get_grad", count, &id));
  return dp_->ReadGrad(id, data);
}

// ---------------------------------------------------------------- metrics

// Totals per collective since the engine was created: count, bytes, seconds
// of the collective's own run time, and algorithm bandwidth.
nlohmann::json Engine::CommJson() const {
  nlohmann::json out = nlohmann::json::object();
  for (CommOp op : {CommOp::kAllReduce, CommOp::kReduce, CommOp::kReduceScatter, CommOp::kAllGather,
                    CommOp::kBroadcast, CommOp::kBarrier}) {
    const CommTotals t = comm_stats_.Totals(op);
    out[CommOpName(op)] = {{"count", t.count},
                           {"bytes", t.bytes},
                           {"seconds", t.seconds},
                           {"bytes_per_sec", t.seconds > 0 ? double(t.bytes) / t.seconds : 0.0}};
  }
  return out;
}

std::string Engine::MetricsJson() const {
  using Json = nlohmann::json;
  auto phases = [](const PhaseTimes &p) {
    return Json{{"forward", p.forward},
                {"backward", p.backward},
                {"reduce", p.reduce},
                {"step", p.step},
                {"total", p.total}};
  };
  Json memory = Json::object();
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    memory[std::string(MemoryCategoryName(cat))] = {{"bytes", memory_.Current(cat)},
                                                    {"peak_bytes", memory_.Peak(cat)}};
  }
  memory["total"] = {{"bytes", memory_.TotalCurrent()}, {"peak_bytes", memory_.TotalPeak()}};
  const double seconds = last_.seconds > 0 ? last_.seconds : 0;
  const double tokens_per_sec = seconds > 0 ? double(last_.tokens) / seconds : 0;
  const bool gpt = model_->spec().type == ModelSpec::Type::kGpt;
  const double step_flops = flops_per_sample_token_ * double(gpt ? last_.tokens : last_.samples);
  Json j = {
      {"step", steps_},
      {"samples", total_samples_},
      {"tokens", total_tokens_},
      {"loss", last_.loss},
      {"lr", last_.lr},
      {"next_lr", NextLearningRate()},
      {"grad_norm", last_.grad_norm},
      {"step_seconds", last_.seconds},
      {"tokens_per_sec", tokens_per_sec},
      {"samples_per_sec", seconds > 0 ? double(last_.samples) / seconds : 0},
      {"flops_per_step", step_flops},
      {"achieved_flops_per_sec", seconds > 0 ? step_flops / seconds : 0},
      {"time_seconds", {{"last_step", phases(last_.phases)}, {"total", phases(total_times_)}}},
      {"memory", memory},
      {"num_parameters", model_->params().size()},
      {"threads", MaxThreads()},
      {"rank", env_.rank},
      {"world_size", env_.world_size},
      {"zero_stage", dp_->stage()},
      {"precision", DTypeName(config_.precision())},
      {"loss_scale", scaler_.scale()},
      {"skipped_steps", skipped_steps_},
      {"comm", CommJson()},
  };
  metrics_json_ = j.dump();
  return metrics_json_;
}

// ---------------------------------------------------------------- monitor

namespace {

constexpr const char *kRankSampleKey = "__dstrain/metrics/rank";

// Resident set size from /proc/self/statm (pages), 0 where unavailable.
int64_t ProcessRssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * int64_t(sysconf(_SC_PAGESIZE));
}

// nccl-tests' bus bandwidth factor for an op over n ranks.
double BusFactor(CommOp op, int64_t n) {
  if (n <= 1) return 0;
  const double ring = double(n - 1) / double(n);
  switch (op) {
    case CommOp::kAllReduce:
      return 2 * ring;
    case CommOp::kAllGather:
    case CommOp::kReduceScatter:
      return ring;
    case CommOp::kReduce:
    case CommOp::kBroadcast:
      return 1;
    case CommOp::kBarrier:
      return 0;
  }
  return 0;
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

metrics::RankIdentity Engine::Identity() const {
  metrics::RankIdentity id;
  id.job = config_.monitor.job;
  id.rank = env_.rank;
  id.local_rank = env_.local_rank;
  id.world_size = env_.world_size;
  id.dp_rank = dp_comm_->rank();  // pure data parallelism: tp and pp ranks are 0
  return id;
}

Status Engine::StartMonitor() {
  if (!config_.monitor.enabled) return Status::Ok();
  metrics::MonitorOptions options;
  options.config = config_.monitor;
  options.identity = Identity();
  options.config_json = config_.resolved_json;
  if (env_.rank == 0 && store_) options.rank_table = [this] { return RankTable(); };
  Result<std::unique_ptr<metrics::Monitor>> monitor = metrics::Monitor::Create(options);
  if (!monitor.ok()) {
    Status st = monitor.status();
    return st.context("starting dstrain.monitor");
  }
  monitor_ = std::move(monitor).value();
  return Status::Ok();
}

std::string Engine::MonitorUrl() const {
  if (!monitor_ || monitor_->http_port() <= 0) return "";
  std::string host = config_.monitor.http.host;
  if (host == "0.0.0.0") host = "127.0.0.1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(monitor_->http_port()) + "/";
}

metrics::StepSample Engine::BuildStepSample() {
  metrics::StepSample s;
  const bool gpt = model_->spec().type == ModelSpec::Type::kGpt;
  const int64_t n = dp_comm_->size();
  const int64_t my_samples = last_.samples / n, my_tokens = last_.tokens / n;
  s.step = steps_;
  s.samples_total = total_samples_ / n;
  s.tokens_total = gpt ? total_tokens_ / n : 0;
  s.loss = last_.loss;
  s.lr = last_.lr;
  s.grad_norm = last_.grad_norm;
  s.loss_scale = scaler_.scale();
  s.skipped_steps_total = skipped_steps_;
  s.step_seconds = last_.seconds;
  if (last_.seconds > 0) {
    s.tokens_per_second = double(gpt ? my_tokens : my_samples) / last_.seconds;
    s.samples_per_second = double(my_samples) / last_.seconds;
    const double flops = flops_per_sample_token_ * double(gpt ? my_tokens : my_samples);
    s.achieved_flops_per_second = flops / last_.seconds;
  }
  if (config_.monitor.peak_flops_per_second > 0)
    s.mfu = s.achieved_flops_per_second / config_.monitor.peak_flops_per_second;

  const PhaseTimes &p = last_.phases;
  const double m = double(std::max<int64_t>(1, last_.micro_batches));
  const char *reduce_name = dp_->stage() >= 2 ? "backward_reduce_scatter" : "backward_allreduce";
  const std::string reduce_micro = std::string(reduce_name) + "_microstep";
  s.timers = {{"forward", p.forward},
              {"backward", p.backward + p.reduce},
              {"backward_inner", p.backward},
              {reduce_name, p.reduce},
              {"step", p.step},
              {"forward_microstep", p.forward / m},
              {"backward_microstep", (p.backward + p.reduce) / m},
              {"backward_inner_microstep", p.backward / m},
              {reduce_micro, p.reduce / m},
              {"step_microstep", p.step}};

  for (int op = 0; op < CommStats::kOps; ++op) {
    const CommTotals t = comm_stats_.Totals(static_cast<CommOp>(op));
    const CommTotals &before = comm_at_last_sample_[size_t(op)];
    metrics::CommOpSample &c = s.comm[size_t(op)];
    c.count = t.count;
    c.bytes = t.bytes;
    c.seconds = t.seconds;
    const double dt = t.seconds - before.seconds;
    if (dt > 0)
      c.bus_bandwidth = double(t.bytes - before.bytes) / dt * BusFactor(static_cast<CommOp>(op), n);
    comm_at_last_sample_[size_t(op)] = t;
  }
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    s.memory[size_t(c)] = {memory_.Current(cat), memory_.Peak(cat)};
  }
  s.process_rss_bytes = ProcessRssBytes();
  s.unix_time = UnixNow();
  return s;
}

Status Engine::RecordStep() {
  if (!monitor_) return Status::Ok();
  const metrics::StepSample sample = BuildStepSample();
  DST_RETURN_IF_ERROR(monitor_->OnStep(sample));
  // The job-wide view: one store write per rank every steps_per_print steps
  // (no collective; rank 0's HTTP thread reads the keys when asked).
  if (store_ && (steps_ % config_.steps_per_print == 0 || steps_ == 1)) {
    const std::string text = nlohmann::json{
        {"identity", metrics::IdentityToJson(Identity())},
        {"sample", metrics::SampleToJson(
                       sample)}}.dump();
    Status st = store_->Set(kRankSampleKey + std::to_string(env_.rank),
                            std::vector<uint8_t>(text.begin(), text.end()));
    if (!st.ok()) return st.context("publishing this rank's metrics to the job table");
  }
  return Status::Ok();
}

nlohmann::json Engine::RankTable() const {
  nlohmann::json ranks = nlohmann::json::array();
  const double now = UnixNow();
  for (int64_t r = 0; r < env_.world_size; ++r) {
    // A rank that has not published yet answers within a millisecond.
    Result<std::vector<uint8_t>> value =
        store_->Get(kRankSampleKey + std::to_string(r), std::chrono::milliseconds(1));
    nlohmann::json row;
    if (value.ok()) {
      row = nlohmann::json::parse(value->begin(), value->end(), nullptr, /*exceptions=*/false);
    }
    if (row.is_discarded() || !row.is_object() || !row.contains("sample")) {
      row = {{"identity", {{"job", config_.monitor.job}, {"rank", r}}}, {"sample", nullptr}};
    }
    const nlohmann::json &sample = row["sample"];
    row["age_seconds"] = nullptr;
    if (sample.is_object() && sample.contains("unix_time"))
      row["age_seconds"] = now - sample["unix_time"].get<double>();
    ranks.push_back(std::move(row));
  }
  return ranks;
}

}  // namespace dst
