// dst_engine_*: the C ABI over dst::Engine.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "capi/src/capi_util.h"
#include "capi/src/versioned_struct.h"
#include "core/engine/engine.h"
#include "core/runtime/threads.h"

struct dst_engine {
  std::unique_ptr<dst::Engine> engine;
  // OpenMP's thread count is per calling thread: it is set again before every
  // call that computes, so an engine works from any thread and next to other
  // engines with other thread counts.
  int threads = 1;
  // Calls on one engine must not overlap: the second is refused, not run.
  // Changed only under the live-handle lock (LiveHandles).
  mutable bool busy = false;
  // dst_engine_abort was called: every later call is refused with
  // DST_ERR_ABORTED until the handle is freed. Under the live-handle lock.
  mutable bool aborting = false;
  // The thread running the current call (when busy): an abort from that
  // same thread cannot wait for the call to return.
  mutable std::thread::id caller;
  std::string metrics_json;  // returned by dst_engine_metrics_json
  std::string memory_json;   // returned by dst_engine_memory_status
  std::string monitor_url;   // returned by dst_engine_monitor_url
  std::string client_state;  // returned by dst_engine_load_checkpoint
};

namespace {

// The engines dst_engine_create made and destroy/abort have not freed. A
// handle is looked up here before it is touched, as sqlite's API armour
// checks its connections: a destroyed handle (or a pointer that never was
// one) is refused without reading the memory it points at. Leaked on
// purpose: calls may come from other threads while the process exits.
struct LiveHandles {
  std::mutex mu;
  std::condition_variable idle;  // a call on some engine returned
  std::unordered_set<const dst_engine_t *> live;
  // Aborted handles, kept so that their addresses never come back (dst_engine_abort).
  std::unordered_map<const dst_engine_t *, std::unique_ptr<dst_engine_t>> dead;
};
LiveHandles &Handles() {
  static LiveHandles *handles = new LiveHandles;
  return *handles;
}

// Entry into a call on one engine: the handle is live and no other call on
// it is running (another thread's call is refused with DST_ERR_STATE, so
// no update is silently lost); released when the call returns.
class EngineCall {
 public:
  EngineCall(const dst_engine_t *engine, const char *call) : engine_(engine) {
    LiveHandles &handles = Handles();
    std::lock_guard<std::mutex> lock(handles.mu);
    if (engine == nullptr) {
      status_ = dst::capi::Fail(DST_ERR_INVALID_ARGUMENT, std::string(call) +
                                                              ": argument 'engine' is NULL; pass "
                                                              "a handle from dst_engine_create");
    } else if (handles.dead.count(engine) != 0 || (handles.live.count(engine) != 0 &&
                                                   engine->aborting)) {
      status_ = dst::capi::Fail(DST_ERR_ABORTED,
                                std::string(call) +
                                    ": the engine was aborted (dst_engine_abort); the handle can "
                                    "only be destroyed now");
    } else if (handles.live.count(engine) == 0) {
      status_ = dst::capi::Fail(DST_ERR_INVALID_ARGUMENT,
                                std::string(call) +
                                    ": the engine handle is not a live engine (used after "
                                    "dst_engine_destroy or dst_engine_abort, or not from "
                                    "dst_engine_create)");
    } else if (std::exchange(engine->busy, true)) {
      status_ = dst::capi::Fail(DST_ERR_STATE,
                                std::string(call) +
                                    ": another call on this engine is still running on another "
                                    "thread; calls on one dst_engine_t must not overlap (serialize "
                                    "them, or give each thread its own engine)");
    } else {
      engine->caller = std::this_thread::get_id();
      entered_ = true;
    }
  }
  ~EngineCall() {
    if (!entered_) return;
    LiveHandles &handles = Handles();
    {
      std::lock_guard<std::mutex> lock(handles.mu);
      engine_->busy = false;
    }
    handles.idle.notify_all();
  }
  EngineCall(const EngineCall &) = delete;
  EngineCall &operator=(const EngineCall &) = delete;
  bool ok() const { return entered_; }
  dst_status_t status() const { return status_; }

 private:
  const dst_engine_t *engine_;
  bool entered_ = false;
  dst_status_t status_ = DST_OK;
};

// The first statement of every call on an engine.
#define DST_ENGINE_ENTER(engine)                  \
  EngineCall engine_call_guard(engine, __func__); \
  if (!engine_call_guard.ok()) return engine_call_guard.status()

// Destroy and abort: a handle already destroyed is left alone (a second
// destroy is a no-op); one that is running a call on another thread is not
// torn down under it. True: the handle is no longer live and is the
// caller's to free.
bool TakeHandle(dst_engine_t *engine) {
  LiveHandles &handles = Handles();
  std::lock_guard<std::mutex> lock(handles.mu);
  if (engine == nullptr || handles.live.count(engine) == 0 || engine->busy) return false;
  handles.live.erase(engine);
  return true;
}

using dst::capi::Fail;
using dst::capi::FromStatus;

// A call that failed after dst_engine_abort was asked for failed because of
// it (a wait cut short, a connection the abort closed): DST_ERR_ABORTED.
dst_status_t EngineStatus(const dst_engine_t *engine, const dst::Status &status) {
  if (!status.ok() && status.code() != dst::Code::kAborted && engine->engine->abort_requested())
    return Fail(DST_ERR_ABORTED, "aborted (dst_engine_abort) while running: " + status.message());
  return FromStatus(status);
}

// dst_engine_abort's first half: marks the engine aborting and, when a call
// on it runs on another thread, raises its abort signal and waits until
// that call has returned. False: nothing to do (not live, or already being
// aborted by another thread), or the running call is on this very thread
// (a signal handler that interrupted it): the signal is raised, the call
// returns DST_ERR_ABORTED, and the handle stays for dst_engine_destroy.
bool StopRunningCall(dst_engine_t *engine) {
  LiveHandles &handles = Handles();
  std::unique_lock<std::mutex> lock(handles.mu);
  if (engine == nullptr || handles.live.count(engine) == 0 || engine->aborting) return false;
  engine->aborting = true;
  if (!engine->busy) return true;
  engine->engine->RequestAbort();
  if (engine->caller == std::this_thread::get_id()) return false;
  handles.idle.wait(lock, [&] { return !engine->busy; });
  return true;
}
using dst::capi::ReadStruct;
using dst::capi::WriteStruct;

dst_status_t ToBatchView(const dst_batch_t *caller, const char *call, dst::BatchView *out) {
  dst_batch_t batch;
  if (dst_status_t st = ReadStruct(caller, call, "batch", &batch); st != DST_OK) return st;
  out->n_samples = batch.n_samples;
  out->seq_len = batch.seq_len;
  out->tokens = batch.tokens;
  out->tokens_count = batch.tokens_count;
  out->targets = batch.targets;
  out->targets_count = batch.targets_count;
  out->inputs = batch.inputs;
  out->inputs_count = batch.inputs_count;
  out->labels = batch.labels;
  out->labels_count = batch.labels_count;
  return DST_OK;
}

std::string OrEmpty(const char *s) {
  return s ? std::string(s) : std::string();
}

}  // namespace

extern "C" {

void dst_engine_options_default(dst_engine_options_t *options) {
  if (!options) return;
  *options = dst_engine_options_t{};
  options->struct_size = sizeof(dst_engine_options_t);
}

void dst_batch_default(dst_batch_t *batch) {
  if (!batch) return;
  *batch = dst_batch_t{};
  batch->struct_size = sizeof(dst_batch_t);
}

dst_status_t dst_engine_create(dst_engine_t **out, const dst_engine_options_t *options) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(out);
  *out = nullptr;
  DST_CAPI_REQUIRE_NONNULL(options);
  dst_engine_options_t known;  // the caller's options as this library knows them
  if (dst_status_t st = ReadStruct(options, "dst_engine_create", "options", &known); st != DST_OK)
    return st;
  options = &known;
  if (options->total_steps < 0)
    return Fail(DST_ERR_INVALID_ARGUMENT, "dst_engine_create: options->total_steps is " +
                                              std::to_string(options->total_steps) +
                                              "; pass 0 (unknown) or the planned step count");
  dst::EngineOptions opts;
  opts.config_text = OrEmpty(options->config_json);
  opts.config_path = OrEmpty(options->config_path);
  opts.model_text = OrEmpty(options->model_json);
  opts.model_path = OrEmpty(options->model_path);
  opts.total_steps = options->total_steps;
  dst::Result<std::unique_ptr<dst::Engine>> engine = dst::Engine::Create(opts);
  if (!engine.ok()) return FromStatus(engine.status());
  auto handle = std::make_unique<dst_engine>();
  handle->engine = std::move(engine).value();
  handle->threads = dst::ResolveNumThreads(handle->engine->config().runtime.num_threads);
  handle->monitor_url = handle->engine->MonitorUrl();
  {
    LiveHandles &handles = Handles();
    std::lock_guard<std::mutex> lock(handles.mu);
    handles.live.insert(handle.get());
  }
  *out = handle.release();
  return DST_OK;
  DST_CAPI_END
}

void dst_engine_destroy(dst_engine_t *engine) {
  if (!TakeHandle(engine)) return;
  // After an abort (one that could not wait for its call), no handshake.
  if (engine->engine->abort_requested()) engine->engine->Abort();
  engine->engine.reset();
  delete engine;
}

void dst_engine_abort(dst_engine_t *engine) {
  if (!StopRunningCall(engine)) return;
  if (!TakeHandle(engine)) return;
  engine->engine->Abort();
  engine->engine.reset();
  // The handle's few bytes are kept, not freed: an aborted handle may still
  // be held by another thread or an SDK object that will destroy it, and
  // its address must not come back from a later dst_engine_create (that
  // destroy would then free someone else's engine).
  std::string().swap(engine->metrics_json);
  std::string().swap(engine->memory_json);
  std::string().swap(engine->monitor_url);
  std::string().swap(engine->client_state);
  LiveHandles &handles = Handles();
  std::lock_guard<std::mutex> lock(handles.mu);
  handles.dead.emplace(engine, std::unique_ptr<dst_engine_t>(engine));
}

dst_status_t dst_engine_get_info(const dst_engine_t *engine, dst_engine_info_t *info) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(info);
  const dst::EngineInfo in = engine->engine->Info();
  dst_engine_info_t out{};
  out.model_type =
      in.model_type == dst::ModelSpec::Type::kSequential ? DST_MODEL_SEQUENTIAL : DST_MODEL_GPT;
  out.loss_type = in.loss == dst::ModelSpec::Loss::kMse ? DST_LOSS_MSE : DST_LOSS_CROSS_ENTROPY;
  out.num_parameters = in.num_parameters;
  out.train_batch_size = in.train_batch_size;
  out.micro_batch_size = in.micro_batch_size;
  out.grad_accum_steps = in.grad_accum_steps;
  out.dp_size = in.dp_size;
  out.rank = in.rank;
  out.world_size = in.world_size;
  out.seq_len = in.seq_len;
  out.vocab_size = in.vocab_size;
  out.input_dim = in.input_dim;
  out.output_dim = in.output_dim;
  out.dp_rank = in.dp_rank;
  out.pp_size = in.pp_size;
  out.pp_rank = in.pp_rank;
  out.tp_size = in.tp_size;
  out.tp_rank = in.tp_rank;
  return WriteStruct(out, "dst_engine_get_info", "info", info);
  DST_CAPI_END
}

#define DST_BATCH_CALL(method, call_name)                                           \
  DST_CAPI_BEGIN                                                                    \
  DST_ENGINE_ENTER(engine);                                                         \
  DST_CAPI_REQUIRE_NONNULL(batch);                                                  \
  dst::BatchView view;                                                              \
  if (dst_status_t s = ToBatchView(batch, call_name, &view); s != DST_OK) return s; \
  dst::SetNumThreads(engine->threads);                                              \
  return EngineStatus(engine, engine->engine->method(view, out_loss));                        \
  DST_CAPI_END

dst_status_t dst_engine_train_batch(dst_engine_t *engine, const dst_batch_t *batch,
                                    float *out_loss){
    DST_BATCH_CALL(TrainBatch, "dst_engine_train_batch")}

dst_status_t dst_engine_eval_batch(dst_engine_t *engine, const dst_batch_t *batch, float *out_loss){
    DST_BATCH_CALL(EvalBatch, "dst_engine_eval_batch")}

dst_status_t
    dst_engine_forward_backward(dst_engine_t *engine, const dst_batch_t *batch, float *out_loss){
        DST_BATCH_CALL(ForwardBackward, "dst_engine_forward_backward")}

dst_status_t dst_engine_step_count(const dst_engine_t *engine, int64_t *out_steps) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(out_steps);
  *out_steps = engine->engine->steps();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_engine_learning_rate(const dst_engine_t *engine, double *out_lr) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(out_lr);
  *out_lr = engine->engine->NextLearningRate();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_engine_loss_scale(const dst_engine_t *engine, double *out_scale,
                                   int64_t *out_skipped_steps) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  if (out_scale) *out_scale = engine->engine->loss_scale();
  if (out_skipped_steps) *out_skipped_steps = engine->engine->skipped_steps();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_engine_param_count(const dst_engine_t *engine, size_t *out_count) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(out_count);
  *out_count = engine->engine->ParamDecls().size();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_engine_param_info(const dst_engine_t *engine, size_t index,
                                   dst_tensor_info_t *info) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(info);
  const auto &decls = engine->engine->ParamDecls();
  if (index >= decls.size())
    return Fail(DST_ERR_INVALID_ARGUMENT, "dst_engine_param_info: index " + std::to_string(index) +
                                              " is out of range; there are " +
                                              std::to_string(decls.size()) + " parameter tensors");
  const dst::ParamDecl &d = decls[index];
  dst_tensor_info_t out{};
  out.name = d.name.c_str();
  out.ndim = int32_t(d.shape.size());
  for (size_t i = 0; i < d.shape.size() && i < DST_MAX_DIMS; ++i) out.shape[i] = d.shape[i];
  out.numel = d.numel;
  return WriteStruct(out, "dst_engine_param_info", "info", info);
  DST_CAPI_END
}

dst_status_t dst_engine_get_param(const dst_engine_t *engine, const char *name, float *data,
                                  size_t count) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(name);
  DST_CAPI_REQUIRE_NONNULL(data);
  return EngineStatus(engine, engine->engine->GetParam(name, data, count));
  DST_CAPI_END
}

dst_status_t dst_engine_set_param(dst_engine_t *engine, const char *name, const float *data,
                                  size_t count) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(name);
  DST_CAPI_REQUIRE_NONNULL(data);
  return EngineStatus(engine, engine->engine->SetParam(name, data, count));
  DST_CAPI_END
}

dst_status_t dst_engine_get_grad(const dst_engine_t *engine, const char *name, float *data,
                                 size_t count) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(name);
  DST_CAPI_REQUIRE_NONNULL(data);
  return EngineStatus(engine, engine->engine->GetGrad(name, data, count));
  DST_CAPI_END
}

dst_status_t dst_engine_save_checkpoint(dst_engine_t *engine, const char *dir, const char *tag,
                                        const char *client_state_json) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(dir);
  const std::string resolved_tag =
      tag ? std::string(tag) : "global_step" + std::to_string(engine->engine->steps());
  return EngineStatus(engine, engine->engine->SaveCheckpoint(dir, resolved_tag, OrEmpty(client_state_json)));
  DST_CAPI_END
}

dst_status_t dst_engine_load_checkpoint(dst_engine_t *engine, const char *dir, const char *tag,
                                        const char **out_client_state) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(dir);
  std::string client;
  dst::Status st = engine->engine->LoadCheckpoint(dir, OrEmpty(tag), &client);
  if (!st.ok()) return EngineStatus(engine, st);
  engine->client_state = std::move(client);
  if (out_client_state) *out_client_state = engine->client_state.c_str();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_engine_load_weights(dst_engine_t *engine, const char *dir, const char *tag) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(dir);
  dst::SetNumThreads(engine->threads);
  return EngineStatus(engine, engine->engine->LoadWeights(dir, OrEmpty(tag)));
  DST_CAPI_END
}

dst_status_t dst_engine_metrics_json(dst_engine_t *engine, const char **out_json) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(out_json);
  engine->metrics_json = engine->engine->MetricsJson();
  *out_json = engine->metrics_json.c_str();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_engine_memory_status(dst_engine_t *engine, const char **out_json) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(out_json);
  engine->memory_json = engine->engine->MemoryStatusJson();
  *out_json = engine->memory_json.c_str();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_engine_config_json(const dst_engine_t *engine, const char **out_json) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(out_json);
  *out_json = engine->engine->ConfigJson().c_str();
  return DST_OK;
  DST_CAPI_END
}

dst_status_t dst_engine_monitor_url(const dst_engine_t *engine, const char **out_url) {
  DST_CAPI_BEGIN
  DST_ENGINE_ENTER(engine);
  DST_CAPI_REQUIRE_NONNULL(out_url);
  *out_url = engine->monitor_url.c_str();
  return DST_OK;
  DST_CAPI_END
}

}  // extern "C"
