#include "core/engine/telemetry.h"

#include "core/offload/nvme_state_store.h"
#include "core/zero/param_partition.h"

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <utility>

#include "core/runtime/threads.h"
#include "metrics/monitor.h"

namespace dst {

namespace {

const ParamSwap *ParamSwapOf(const TelemetryContext &ctx) {
  return ctx.params ? ctx.params->swap() : nullptr;
}

constexpr const char *kRankSampleKey = "__dstrain/metrics/rank";

// Resident set size from /proc/self/statm (pages), 0 where unavailable.
int64_t ProcessRssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * int64_t(sysconf(_SC_PAGESIZE));
}

// A "Key:   123 kB" line of a /proc file, in bytes (0 where absent).
int64_t ProcKilobytes(const char *path, const std::string &key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() &&
        line[key.size()] == ':')
      return std::atoll(line.c_str() + key.size() + 1) * 1024;
  return 0;
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
    case CommOp::kSend:
    case CommOp::kRecv:
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

Telemetry::Telemetry(TelemetryContext context) : ctx_(std::move(context)) {}

Telemetry::~Telemetry() = default;

void Telemetry::StopMonitor() {
  monitor_.reset();
}

metrics::RankIdentity Telemetry::Identity() const {
  metrics::RankIdentity id;
  id.job = ctx_.config->monitor.job;
  id.rank = ctx_.env.rank;
  id.local_rank = ctx_.env.local_rank;
  id.world_size = ctx_.env.world_size;
  id.dp_rank = ctx_.dp_rank;
  id.tp_rank = ctx_.tp_rank;
  id.pp_rank = ctx_.pp_rank;
  id.offload_optimizer = ctx_.config->zero.offload_optimizer_device;
  id.offload_param = ctx_.config->zero.offload_param_device;
  if (ctx_.nvme) id.offload_io_engine = ctx_.nvme->file().io().engine();
  if (const ParamSwap *swap = ParamSwapOf(ctx_); swap && !ctx_.nvme)
    id.offload_io_engine = swap->file().io().engine();
  return id;
}

Status Telemetry::StartMonitor() {
  if (!ctx_.config->monitor.enabled) return Status::Ok();
  metrics::MonitorOptions options;
  options.config = ctx_.config->monitor;
  options.identity = Identity();
  options.config_json = ctx_.config->resolved_json;
  if (ctx_.env.rank == 0 && ctx_.store) options.rank_table = [this] { return RankTable(); };
  Result<std::unique_ptr<metrics::Monitor>> monitor = metrics::Monitor::Create(options);
  if (!monitor.ok()) {
    Status st = monitor.status();
    return st.context("starting dstrain.monitor");
  }
  monitor_ = std::move(monitor).value();
  return Status::Ok();
}

std::string Telemetry::MonitorUrl() const {
  if (!monitor_ || monitor_->http_port() <= 0) return "";
  std::string host = ctx_.config->monitor.http.host;
  if (host == "0.0.0.0") host = "127.0.0.1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(monitor_->http_port()) + "/";
}

void Telemetry::FillLive(metrics::StepSample *s) const {
  auto fill = [](const CommTotals &t, metrics::CommOpSample *c) {
    c->count = t.count;
    c->bytes = t.bytes;
    c->seconds = t.seconds;
  };
  for (int op = 0; op < CommStats::kOps; ++op) {
    fill(ctx_.comm->Totals(static_cast<CommOp>(op)), &s->comm[size_t(op)]);
    for (int g = 0; g < kNumCommGroups; ++g)
      fill(ctx_.comm->Totals(static_cast<CommGroup>(g), static_cast<CommOp>(op)),
           &s->comm_by_group[size_t(g)][size_t(op)]);
  }
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    s->memory[size_t(c)] = {ctx_.memory->Current(cat), ctx_.memory->Peak(cat)};
  }
  s->device_memory = {ctx_.memory->DeviceCurrent(), ctx_.memory->DevicePeak()};
  s->process_rss_bytes = ProcessRssBytes();
  // Both tiers' I/O (optimizer and parameters).
  const auto add_io = [s](const IoCounters &io) {
    s->offload_read_bytes_total += io.read_bytes;
    s->offload_write_bytes_total += io.write_bytes;
    s->offload_io_wait_seconds_total += io.wait_seconds;
  };
  if (ctx_.nvme) add_io(ctx_.nvme->io_counters());
  if (const auto *swap = ParamSwapOf(ctx_)) add_io(swap->io_counters());
  if (ctx_.compression) {
    s->compression_payload_bytes_total = ctx_.compression->payload_bytes;
    s->compression_dense_bytes_total = ctx_.compression->dense_bytes;
  }
  if (ctx_.momentum_exchange) {  // the same counters: what went compressed, against fp32
    s->compression_payload_bytes_total = ctx_.momentum_exchange->totals().payload_bytes;
    s->compression_dense_bytes_total = ctx_.momentum_exchange->totals().dense_bytes;
  }
}

namespace {
void AddTotals(const CompressionTotals &t, nlohmann::json *j) {
  (*j)["buckets"] = t.buckets;
  (*j)["dense_bytes"] = t.dense_bytes;
  (*j)["payload_bytes"] = t.payload_bytes;
  (*j)["gathered_bytes"] = t.gathered_bytes;
  (*j)["payload_ratio"] = t.dense_bytes > 0 ? double(t.payload_bytes) / double(t.dense_bytes) : 0.0;
}
}  // namespace

// gradient_compression: the settings and what the encodings saved so far.
nlohmann::json Telemetry::CompressionJson() const {
  const GradientCompressionConfig &gc = ctx_.config->gradient_compression;
  nlohmann::json j = {{"enabled", gc.enabled}};
  const OptimizerType optimizer = ctx_.config->optimizer.type;
  if (optimizer == OptimizerType::kOneBitAdam || optimizer == OptimizerType::kZeroOneAdam ||
      optimizer == OptimizerType::kOneBitLamb) {
    // The 1-bit optimizers: each exchange is one "bucket".
    j["enabled"] = true;
    j["algorithm"] = optimizer == OptimizerType::kOneBitAdam   ? "onebit_adam_momentum"
                     : optimizer == OptimizerType::kOneBitLamb ? "onebit_lamb_momentum"
                                                               : "zero_one_adam";
    if (optimizer != OptimizerType::kZeroOneAdam)
      j["freeze_step"] = ctx_.config->optimizer.freeze_step;
    AddTotals(ctx_.momentum_exchange ? ctx_.momentum_exchange->totals() : CompressionTotals{}, &j);
    return j;
  }
  if (!gc.enabled) return j;
  j["algorithm"] = gc.algorithm;
  j["topk_ratio"] = gc.topk_ratio;
  j["huffman_coding"] = gc.huffman_coding;
  j["warmup_steps"] = gc.warmup_steps;
  j["momentum_correction"] = gc.momentum_correction;
  j["chunk_size"] = gc.chunk_size;
  j["target"] = gc.target;
  AddTotals(ctx_.compression ? *ctx_.compression : CompressionTotals{}, &j);
  return j;
}

// Where the rank trains, and how many of the tracked bytes are that device's
// (the rest are host memory: on a device, host copies and offloaded state).
nlohmann::json Telemetry::DeviceMemoryJson() const {
  return {{"name", ctx_.device},
          {"bytes", ctx_.memory->DeviceCurrent()},
          {"peak_bytes", ctx_.memory->DevicePeak()}};
}

nlohmann::json Telemetry::MemoryStatusJson() const {
  nlohmann::json categories = nlohmann::json::object();
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    categories[std::string(MemoryCategoryName(cat))] = {{"bytes", ctx_.memory->Current(cat)},
                                                        {"peak_bytes", ctx_.memory->Peak(cat)}};
  }
  return {
      {"categories", categories},
      {"total", {{"bytes", ctx_.memory->TotalCurrent()}, {"peak_bytes", ctx_.memory->TotalPeak()}}},
      {"device", DeviceMemoryJson()},
      {"process",
       {{"rss_bytes", ProcessRssBytes()},
        {"peak_rss_bytes", ProcKilobytes("/proc/self/status", "VmHWM")}}},
      {"system",
       {{"total_bytes", ProcKilobytes("/proc/meminfo", "MemTotal")},
        {"available_bytes", ProcKilobytes("/proc/meminfo", "MemAvailable")}}}};
}

// The optimizer tier: where it lives, and for NVMe its file and I/O so far.
nlohmann::json Telemetry::OffloadJson() const {
  const std::string &device = ctx_.config->zero.offload_optimizer_device;
  // Moved: on NVMe, or in host memory while the rank trains on a device.
  const bool moved = ctx_.nvme != nullptr || (device == "cpu" && ctx_.device != "cpu");
  nlohmann::json optimizer = {{"device", device}, {"moved", moved}};
  if (ctx_.nvme) {
    const NvmeStateStore &nvme = *ctx_.nvme;
    const IoCounters io = nvme.io_counters();
    const SwapGeometry &g = nvme.geometry();
    optimizer.update({{"path", nvme.file().path()},
                      {"io_engine", nvme.file().io().engine()},
                      {"direct_io", nvme.file().direct()},
                      {"file_bytes", g.FileBytes()},
                      {"piece_elements", g.piece_elements},
                      {"pieces", g.pieces},
                      {"buffers", nvme.buffers()},
                      {"committed_step", nvme.committed_step()},
                      {"resumed_from_step", nvme.resumed_step()},
                      {"read_bytes", io.read_bytes},
                      {"write_bytes", io.write_bytes},
                      {"requests", io.requests},
                      {"short_transfers", io.short_transfers},
                      {"io_wait_seconds", io.wait_seconds},
                      {"aio",
                       {{"block_size", nvme.aio().block_size},
                        {"queue_depth", nvme.aio().queue_depth},
                        {"probed", nvme.aio_probed()}}}});
  }
  return {{"optimizer", optimizer}, {"param", ParamOffloadJson()}};
}

// The parameter tier (ZeRO 3, offload_param): what stays in memory, and for
// NVMe the swap file and its I/O so far.
nlohmann::json Telemetry::ParamOffloadJson() const {
  const ParamSwap *swap = ParamSwapOf(ctx_);
  // Moved: to NVMe, or into host memory while the rank trains on a device.
  const bool on_host = ctx_.params != nullptr && ctx_.params->host_shard();
  nlohmann::json param = {{"device", ctx_.config->zero.offload_param_device},
                          {"moved", swap != nullptr || on_host}};
  if (ctx_.config->zero.offload_param_device != "nvme" || !ctx_.params) return param;
  param["resident_elements"] = ctx_.params->resident_elements();
  param["swapped_elements"] = swap ? ctx_.params->swapped_elements() : 0;
  if (!swap) return param;
  const IoCounters io = swap->io_counters();
  param.update({{"path", swap->file().path()},
                {"io_engine", swap->file().io().engine()},
                {"direct_io", swap->file().direct()},
                {"file_bytes", swap->file().geometry().FileBytes()},
                {"windows", swap->windows()},
                {"buffer_bytes", swap->buffer_bytes()},
                {"committed_step", swap->committed_step()},
                {"read_bytes", io.read_bytes},
                {"write_bytes", io.write_bytes},
                {"requests", io.requests},
                {"short_transfers", io.short_transfers},
                {"io_wait_seconds", io.wait_seconds}});
  return param;
}

metrics::StepSample Telemetry::BuildStepSample(const StepRecord &rec,
                                               const TrainingProgress &progress,
                                               double loss_scale) const {
  metrics::StepSample s;
  const int64_t n = ctx_.dp_size;
  const int64_t my_samples = rec.samples / n, my_tokens = rec.tokens / n;
  s.step = progress.steps;
  s.samples_total = job_samples_ / n;
  s.tokens_total = ctx_.gpt ? job_tokens_ / n : 0;
  s.loss = rec.loss;
  s.lr = rec.lr;
  s.grad_norm = rec.grad_norm;
  s.loss_scale = loss_scale;
  s.compute_seconds = straggler_.compute_seconds;
  s.straggler = straggler_.slow;
  s.straggler_slower_by = straggler_.slower_by;
  s.skipped_steps_total = progress.skipped_steps;
  s.step_seconds = rec.seconds;
  if (rec.seconds > 0) {
    s.tokens_per_second = double(ctx_.gpt ? my_tokens : my_samples) / rec.seconds;
    s.samples_per_second = double(my_samples) / rec.seconds;
    const double flops = ctx_.flops_per_sample_token * double(ctx_.gpt ? my_tokens : my_samples);
    s.achieved_flops_per_second = flops / rec.seconds;
  }
  if (ctx_.config->monitor.peak_flops_per_second > 0)
    s.mfu = s.achieved_flops_per_second / ctx_.config->monitor.peak_flops_per_second;

  const PhaseTimes &p = rec.phases;
  const double m = double(std::max<int64_t>(1, rec.micro_batches));
  const char *reduce_name = ctx_.zero_stage >= 2 ? "backward_reduce_scatter" : "backward_allreduce";
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
  if (ctx_.pp_size > 1) {
    // DeepSpeed's pipeline timers; a send is the time to post it, a receive
    // the time spent waiting for it: the stage's bubble (pipe_bubble) plus
    // the transfer itself.
    s.timers.push_back({"pipe_send_output", p.send_output});
    s.timers.push_back({"pipe_recv_input", p.recv_input});
    s.timers.push_back({"pipe_send_grad", p.send_grad});
    s.timers.push_back({"pipe_recv_grad", p.recv_grad});
    s.timers.push_back({"pipe_bubble", p.recv_input + p.recv_grad});
  }

  s.timeline = rec.timeline;
  FillLive(&s);
  s.unix_time = UnixNow();
  return s;
}

namespace {

// The bus bytes and seconds of the ops since `before` (then moved to now),
// for a group of `n` ranks; sets the group's bus bandwidth.
std::pair<double, double> SetBusBandwidth(CommOp op, int64_t n, metrics::CommOpSample *c,
                                          CommTotals *before) {
  const double dt = c->seconds - before->seconds;
  const double bus_bytes = double(c->bytes - before->bytes) * BusFactor(op, n);
  if (dt > 0) c->bus_bandwidth = bus_bytes / dt;
  *before = {c->count, c->bytes, c->seconds};
  return {bus_bytes, dt};
}

}  // namespace

// Per group by its own size; over every group, each group's bus bytes (by
// its size) over their total time.
void Telemetry::AddBusBandwidth(metrics::StepSample *s) {
  const int64_t group_size[kNumCommGroups] = {ctx_.dp_size, ctx_.tp_size, ctx_.pp_size};
  for (int op = 0; op < CommStats::kOps; ++op) {
    const auto kind = static_cast<CommOp>(op);
    double bus_bytes = 0, seconds = 0;
    for (int g = 0; g < kNumCommGroups; ++g) {
      const auto [b, dt] =
          SetBusBandwidth(kind, group_size[g], &s->comm_by_group[size_t(g)][size_t(op)],
                          &group_at_last_sample_[size_t(g)][size_t(op)]);
      bus_bytes += b;
      seconds += dt;
    }
    metrics::CommOpSample &all = s->comm[size_t(op)];
    CommTotals &before = comm_at_last_sample_[size_t(op)];
    if (all.seconds - before.seconds > 0 && seconds > 0) all.bus_bandwidth = bus_bytes / seconds;
    before = {all.count, all.bytes, all.seconds};
  }
}

Status Telemetry::OnStep(const StepRecord &record, const TrainingProgress &progress,
                         double loss_scale) {
  last_record_ = record;
  total_times_.Add(record.phases);
  job_samples_ += record.samples;
  job_tokens_ += record.tokens;
  DST_RETURN_IF_ERROR(RecordTrialMetric(record, progress));
  if (!monitor_) return Status::Ok();  // no sample is built: a step allocates nothing
  metrics::StepSample sample = BuildStepSample(record, progress, loss_scale);
  AddBusBandwidth(&sample);
  DST_RETURN_IF_ERROR(monitor_->OnStep(sample));
  // The job-wide view: one store write per rank every steps_per_print steps
  // (no collective; rank 0's HTTP thread reads the keys when asked).
  const int64_t step = progress.steps;
  if (ctx_.store && (step % ctx_.config->steps_per_print == 0 || step == 1)) {
    const std::string text = nlohmann::json{
        {"identity", metrics::IdentityToJson(Identity())},
        {"sample", metrics::SampleToJson(
                       sample)}}.dump();
    Status st = ctx_.store->Set(kRankSampleKey + std::to_string(ctx_.env.rank),
                                std::vector<uint8_t>(text.begin(), text.end()));
    if (!st.ok()) return st.context("publishing this rank's metrics to the job table");
  }
  return Status::Ok();
}

// DeepSpeed's autotuning metric file: the mean of the profiled steps, from
// rank 0, written whole (a tuner polls for it and reads it once it exists).
Status Telemetry::RecordTrialMetric(const StepRecord &record, const TrainingProgress &progress) {
  const AutotuningConfig &tuning = ctx_.config->autotuning;
  if (!tuning.enabled || tuning.metric_path.empty() || trial_.written) return Status::Ok();
  const int64_t step = progress.steps - 1;  // the step that just ran (0-based global step)
  if (step < tuning.start_profile_step) return Status::Ok();
  const int64_t n = ctx_.dp_size;
  const double mine = double(ctx_.gpt ? record.tokens / n : record.samples / n);
  trial_.steps += 1;
  trial_.seconds += record.seconds;
  trial_.samples += double(record.samples);
  trial_.tokens += double(record.tokens);
  trial_.flops += ctx_.flops_per_sample_token * mine;
  if (step < tuning.end_profile_step) return Status::Ok();
  trial_.written = true;
  if (ctx_.env.rank != 0) return Status::Ok();
  const double seconds = std::max(trial_.seconds, 1e-12);
  const nlohmann::json metric = {
      {"throughput", trial_.samples / seconds},           // samples per second, job-wide
      {"latency", 1e3 * seconds / double(trial_.steps)},  // milliseconds per step
      {"FLOPS_per_gpu", trial_.flops / seconds},          // rank 0's achieved FLOP/s
      {"tokens_per_second", trial_.tokens / seconds},     // job-wide (0: no tokens)
      {"steps", trial_.steps},
      {"start_profile_step", tuning.start_profile_step},
      {"end_profile_step", tuning.end_profile_step}};
  const std::string tmp = tuning.metric_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << metric.dump(2) << "\n";
    if (!out.good())
      return IoError("autotuning.metric_path: cannot write \"" + tmp +
                     "\" (a missing directory, no permission or a full disk); point "
                     "metric_path at a writable directory");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, tuning.metric_path, ec);
  if (ec) return IoError("autotuning.metric_path: cannot rename \"" + tmp + "\": " + ec.message());
  return Status::Ok();
}

nlohmann::json Telemetry::CommJson() const {
  auto totals = [](const CommTotals &t) {
    return nlohmann::json{{"count", t.count},
                          {"bytes", t.bytes},
                          {"seconds", t.seconds},
                          {"bytes_per_sec", t.seconds > 0 ? double(t.bytes) / t.seconds : 0.0}};
  };
  nlohmann::json out = nlohmann::json::object();
  nlohmann::json by_group = nlohmann::json::object();
  for (int op = 0; op < CommStats::kOps; ++op) {
    const auto kind = static_cast<CommOp>(op);
    out[CommOpName(kind)] = totals(ctx_.comm->Totals(kind));
    for (int g = 0; g < kNumCommGroups; ++g)
      by_group[metrics::kCommGroupNames[size_t(g)]][CommOpName(kind)] =
          totals(ctx_.comm->Totals(static_cast<CommGroup>(g), kind));
  }
  out["by_group"] = std::move(by_group);  // the same per process group (dp, tp, pp)
  return out;
}

std::string Telemetry::MetricsJson(const TrainingState &state) const {
  using Json = nlohmann::json;
  // The last step's figures, with memory and counters as they are now.
  const metrics::StepSample s = BuildStepSample(last_record_, *state.progress, state.loss_scale);
  auto timer = [&s](const char *name) {
    for (const auto &[key, seconds] : s.timers)
      if (key == name) return seconds;
    return 0.0;
  };
  const double reduce =
      timer(ctx_.zero_stage >= 2 ? "backward_reduce_scatter" : "backward_allreduce");
  auto phases = [](double forward, double backward, double reduce, double step, double total) {
    return Json{{"forward", forward},
                {"backward", backward},
                {"reduce", reduce},
                {"step", step},
                {"total", total}};
  };
  Json memory = Json::object();
  for (size_t c = 0; c < s.memory.size(); ++c)
    memory[metrics::kMemoryCategoryNames[c]] = {{"bytes", s.memory[c].current_bytes},
                                                {"peak_bytes", s.memory[c].peak_bytes}};
  memory["total"] = {{"bytes", ctx_.memory->TotalCurrent()},
                     {"peak_bytes", ctx_.memory->TotalPeak()}};
  memory["device"] = DeviceMemoryJson();
  const double n = double(ctx_.dp_size);
  const double job_tokens_per_sec = s.tokens_per_second * n;  // tokens (GPT) or samples
  const double job_samples_per_sec = s.samples_per_second * n;
  // The whole model's FLOPs at the job's sample rate (a pipeline rank
  // computes only its stage's share).
  const double job_flops = ctx_.model_flops_per_sample_token * job_tokens_per_sec;
  Json j = {
      {"step", state.progress->steps},
      {"samples", job_samples_},
      {"tokens", job_tokens_},
      {"loss", s.loss},
      {"lr", s.lr},
      {"next_lr", state.next_lr},
      {"grad_norm", s.grad_norm},
      {"step_seconds", s.step_seconds},
      {"tokens_per_sec", job_tokens_per_sec},
      {"samples_per_sec", job_samples_per_sec},
      {"job_tokens_per_sec", job_tokens_per_sec},
      {"job_samples_per_sec", job_samples_per_sec},
      {"tokens_per_second", s.tokens_per_second},
      {"samples_per_second", s.samples_per_second},
      {"flops_per_step", job_flops * s.step_seconds},
      {"achieved_flops_per_sec", job_flops},
      {"time_seconds",
       {{"last_step",
         phases(timer("forward"), timer("backward_inner"), reduce, timer("step"), s.step_seconds)},
        {"total", phases(total_times_.forward, total_times_.backward, total_times_.reduce,
                         total_times_.step, total_times_.total)}}},
      {"memory", memory},
      {"process_rss_bytes", s.process_rss_bytes},
      {"num_parameters", ctx_.num_parameters},
      {"threads", MaxThreads()},
      {"rank", ctx_.env.rank},
      {"world_size", ctx_.env.world_size},
      {"zero_stage", ctx_.zero_stage},
      // On this CPU engine "cpu" offload moves nothing: the state is in host memory.
      {"offload", OffloadJson()},
      {"pipeline",
       {{"stages", ctx_.pp_size},
        {"stage", ctx_.pp_rank},
        {"last_step",
         {{"send_output", timer("pipe_send_output")},
          {"recv_input", timer("pipe_recv_input")},
          {"send_grad", timer("pipe_send_grad")},
          {"recv_grad", timer("pipe_recv_grad")},
          {"bubble", timer("pipe_bubble")}}},
        {"timeline", metrics::TimelineToJson(s.timeline)}}},
      {"precision", DTypeName(ctx_.config->precision())},
      {"compute_type", ctx_.compute == ComputeType::kBf16 ? "bf16" : "fp32"},
      {"fp32_modules", ctx_.config->fp32_modules()},
      {"fp32_parameters", ctx_.fp32_parameters},
      {"loss_scale", state.loss_scale},
      {"skipped_steps", state.progress->skipped_steps},
      {"comm", CommJson()},
      {"compression", CompressionJson()},
      {"straggler",
       {{"tolerance", ctx_.config->communication.slow_node_tolerance},
        {"compute_seconds", straggler_.compute_seconds},
        {"this_rank_slow", straggler_.slow},
        {"slower_by", straggler_.slower_by},
        {"last_check", straggler_.last_check}}},
  };
  metrics_json_ = j.dump();
  return metrics_json_;
}

nlohmann::json Telemetry::RankTable() const {
  nlohmann::json ranks = nlohmann::json::array();
  const double now = UnixNow();
  for (int64_t r = 0; r < ctx_.env.world_size; ++r) {
    // A rank that has not published yet answers within a millisecond.
    Result<std::vector<uint8_t>> value =
        ctx_.store->Get(kRankSampleKey + std::to_string(r), std::chrono::milliseconds(1));
    nlohmann::json row;
    if (value.ok()) {
      row = nlohmann::json::parse(value->begin(), value->end(), nullptr, /*exceptions=*/false);
    }
    if (row.is_discarded() || !row.is_object() || !row.contains("sample")) {
      row = {{"identity", {{"job", ctx_.config->monitor.job}, {"rank", r}}}, {"sample", nullptr}};
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
