#include "core/engine/step_profiler.h"
#include "core/common/log.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/engine/schedule.h"

namespace dst {

namespace {

// The trace's lanes (Chrome's thread ids within a rank's process).
enum Lane : int { kProgramLane = 0, kLayerLane = 1, kCommLane = 2 };  // + CommGroup
const char *const kGroupNames[] = {"dp", "tp", "pp"};

std::string FormatCount(double v) {
  const char *units[] = {"", " K", " M", " G", " T", " P"};
  int u = 0;
  while (std::abs(v) >= 1000 && u < 5) v /= 1000, ++u;
  char out[32];
  std::snprintf(out, sizeof out, u == 0 ? "%.0f%s" : "%.2f%s", v, units[u]);
  return out;
}

std::string FormatSeconds(double s) {
  char out[32];
  std::snprintf(out, sizeof out, "%.3f ms", s * 1e3);
  return out;
}

std::string FlopsPerSecond(double flops, double seconds) {
  return seconds > 0 && flops > 0 ? FormatCount(flops / seconds) + "FLOP/s" : "-";
}

}  // namespace

StepProfiler::StepProfiler(const Config &config, int64_t rank)
    : config_(config), rank_(rank), origin_(std::chrono::steady_clock::now()) {}

StepProfiler::~StepProfiler() {
  if (model_) model_->SetLayerTimer(nullptr);
}

void StepProfiler::Attach(Model<float> *model, Executor *executor) {
  model_ = model;
  executor_ = executor;
  layer_times_.assign(model_->layers().size(), {});
}

Status StepProfiler::Prepare() {
  if (!config_.trace.enabled) return Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(config_.trace.path, ec);
  if (ec || !std::filesystem::is_directory(config_.trace.path))
    return IoError("dstrain.trace.path \"" + config_.trace.path +
                   "\": cannot create the trace directory (" +
                   (ec ? ec.message() : std::string("not a directory")) +
                   "); give a writable directory or set dstrain.trace.enabled to false");
  return Status::Ok();
}

bool StepProfiler::Tracing(int64_t step) const {
  const std::vector<int64_t> &steps = config_.trace.steps;
  return config_.trace.enabled && std::find(steps.begin(), steps.end(), step) != steps.end();
}

double StepProfiler::Micros(TimePoint t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

void StepProfiler::BeginStep(int64_t step) {
  step_ = step;
  compute_seconds_ = 0;
  tracing_ = Tracing(step);
  profiling_ = config_.flops_profiler.enabled && step == config_.flops_profiler.profile_step;
  if (model_ && every_step_) model_->SetLayerTimer(this);
  if (!tracing_ && !profiling_) return;
  layer_times_.assign(layer_times_.size(), {});
  if (model_) model_->SetLayerTimer(this);
  if (executor_) executor_->SetRecordTimeline(true);
  armed_ = true;
}

void StepProfiler::EndStep(const StepRecord *record) {
  if (!armed_) return;
  armed_ = false;
  if (model_ && !every_step_) model_->SetLayerTimer(nullptr);
  if (executor_) executor_->SetRecordTimeline(false);
  if (record == nullptr) return;  // a failed step: nothing to report
  if (tracing_) {
    AddInstructions(*record);
    Status written = WriteTrace();
    if (!written.ok() && !warned_) {
      warned_ = true;
      Log(LogLevel::kWarning, "trace", written.message() + " (training goes on)");
    }
  }
  if (profiling_) {
    flops_report_ = FlopsReport(*record);
    if (rank_ != 0) return;
    const std::string &file = config_.flops_profiler.output_file;
    if (file.empty()) {
      std::fputs(flops_report_.c_str(), stdout);
      std::fflush(stdout);
      return;
    }
    std::ofstream out(file, std::ios::trunc);
    out << flops_report_;
    if (!out.good() && !warned_) {
      warned_ = true;
      Log(LogLevel::kWarning, "flops_profiler",
          "output_file \"" + file + "\": cannot write it; the profile follows\n" + flops_report_);
    }
  }
}

void StepProfiler::Record(LayerPass pass, size_t layer, int64_t micro_rows, TimePoint begin,
                          TimePoint end) {
  const double seconds = std::chrono::duration<double>(end - begin).count();
  compute_seconds_ += seconds;
  if (!armed_) return;
  LayerTimes &t = layer_times_[layer];
  if (pass == LayerPass::kForward) {
    t.forward += seconds;
    ++t.forward_calls;
  } else if (pass == LayerPass::kRecompute) {
    t.recompute += seconds;
  } else {
    t.backward += seconds;
  }
  if (!tracing_) return;
  const std::string kind(model_->layers()[layer]->Kind());
  const size_t global = model_->global_layer(layer);
  nlohmann::json args = {{"layer", global}, {"kind", kind}, {"rows", micro_rows}};
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({std::string(LayerPassName(pass)) + " " + std::to_string(global) + " " + kind,
                     "layer", kLayerLane, Micros(begin), Micros(end) - Micros(begin), args.dump()});
}

void StepProfiler::OnCollective(CommGroup group, const CommRecord &r) {
  if (!armed_ || !tracing_) return;
  const TimePoint end = std::chrono::steady_clock::now();
  const double end_us = Micros(end), dur_us = r.seconds * 1e6;
  const int g = static_cast<int>(group);
  nlohmann::json args = {{"bytes", r.bytes}, {"group", kGroupNames[g]}};
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({std::string(CommOpName(r.op)) + " (" + kGroupNames[g] + ")", "comm",
                     kCommLane + g, end_us - dur_us, dur_us, args.dump()});
}

void StepProfiler::AddInstructions(const StepRecord &record) {
  const double start = Micros(record.start);
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json step_args = {{"step", step_},
                              {"loss", record.loss},
                              {"micro_batches", record.micro_batches},
                              {"skipped", record.skipped}};
  events_.push_back({"step " + std::to_string(step_), "step", kProgramLane, start,
                     record.seconds * 1e6, step_args.dump()});
  for (const metrics::TimelineEvent &e : record.timeline) {
    nlohmann::json args = {{"micro_batch", e.micro_batch}, {"chunk", e.chunk}};
    std::string name = e.op;
    if (e.micro_batch >= 0) name += " mb " + std::to_string(e.micro_batch);
    events_.push_back({name, "program", kProgramLane, start + e.start * 1e6,
                       (e.end - e.start) * 1e6, args.dump()});
  }
}

Status StepProfiler::WriteTrace() const {
  nlohmann::json events = nlohmann::json::array();
  const int64_t pid = rank_;
  auto meta = [&](const char *what, int tid, const std::string &name) {
    events.push_back(
        {{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
  };
  meta("process_name", 0, "rank " + std::to_string(rank_));
  meta("thread_name", kProgramLane, "program");
  meta("thread_name", kLayerLane, "layers");
  for (int g = 0; g < kNumCommGroups; ++g)
    meta("thread_name", kCommLane + g, std::string("comm ") + kGroupNames[g]);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const TraceEvent &e : events_)
      events.push_back({{"ph", "X"},
                        {"name", e.name},
                        {"cat", e.category},
                        {"pid", pid},
                        {"tid", e.lane},
                        {"ts", e.ts_us},
                        {"dur", std::max(0.0, e.dur_us)},
                        {"args", nlohmann::json::parse(e.args)}});
  }
  const nlohmann::json doc = {{"traceEvents", events},
                              {"displayTimeUnit", "ms"},
                              {"otherData",
                               {{"rank", rank_},
                                {"zero_stage", config_.zero.stage},
                                {"dp_size", config_.dp_size},
                                {"tp_size", config_.tp_size},
                                {"pp_size", config_.pp_size},
                                {"steps", config_.trace.steps}}}};
  const std::string path =
      config_.trace.path + "/dstrain_trace_rank" + std::to_string(rank_) + ".json";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << doc.dump();
    if (!out.good())
      return IoError("dstrain.trace: cannot write \"" + tmp +
                     "\" (disk full or not writable); free space or change dstrain.trace.path");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return IoError("dstrain.trace: cannot rename \"" + tmp + "\": " + ec.message());
  return Status::Ok();
}

std::string StepProfiler::FlopsReport(const StepRecord &record) const {
  const FlopsProfilerConfig &fp = config_.flops_profiler;
  const int64_t B = config_.train_micro_batch_size_per_gpu;
  const int64_t seq = record.samples > 0 ? std::max<int64_t>(1, record.tokens / record.samples) : 1;
  const double micro = double(record.micro_batches);
  struct Row {
    size_t layer;
    std::string kind;
    int64_t params;
    double fwd_flops, fwd_s, bwd_s, recompute_s;
  };
  std::vector<Row> rows;
  double total_fwd_flops = 0, total_fwd = 0, total_bwd = 0, total_recompute = 0;
  int64_t total_params = 0;
  for (size_t i = 0; i < layer_times_.size(); ++i) {
    const LayerParamUse &use = model_->layer_params()[i];
    const Row r{model_->global_layer(i),  std::string(model_->layers()[i]->Kind()),
                use.end - use.begin,      micro * model_->layers()[i]->ForwardFlops(B, seq),
                layer_times_[i].forward,  layer_times_[i].backward,
                layer_times_[i].recompute};
    total_fwd_flops += r.fwd_flops, total_fwd += r.fwd_s, total_bwd += r.bwd_s;
    total_recompute += r.recompute_s, total_params += r.params;
    rows.push_back(r);
  }
  const double total_flops = 3 * total_fwd_flops;  // forward + backward (2x forward)
  std::string out;
  char line[512];
  auto add = [&](const char *fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    out += line;
  };
  add("\n-------------------------- dstrain flops profiler --------------------------\n");
  add("profile step:                      %lld (global step, 0-based)\n",
      static_cast<long long>(step_));
  add("rank:                              %lld of dp %lld x tp %lld x pp %lld "
      "(this rank's layers)\n",
      static_cast<long long>(rank_), static_cast<long long>(config_.dp_size),
      static_cast<long long>(config_.tp_size), static_cast<long long>(config_.pp_size));
  add("micro-batches x samples x tokens:  %lld x %lld x %lld\n",
      static_cast<long long>(record.micro_batches), static_cast<long long>(B),
      static_cast<long long>(seq));
  add("params (this rank):                %s\n", FormatCount(double(total_params)).c_str());
  add("fwd FLOPs / fwd+bwd FLOPs:         %s / %s\n", FormatCount(total_fwd_flops).c_str(),
      FormatCount(total_flops).c_str());
  add("fwd latency / FLOP/s:              %s / %s\n", FormatSeconds(total_fwd).c_str(),
      FlopsPerSecond(total_fwd_flops, total_fwd).c_str());
  add("bwd latency / FLOP/s:              %s / %s\n", FormatSeconds(total_bwd).c_str(),
      FlopsPerSecond(2 * total_fwd_flops, total_bwd).c_str());
  if (total_recompute > 0)
    add("recomputation latency:             %s\n", FormatSeconds(total_recompute).c_str());
  add("step latency / FLOP/s:             %s / %s\n", FormatSeconds(record.seconds).c_str(),
      FlopsPerSecond(total_flops, record.seconds).c_str());
  add("layers' share of the step:         %.1f%% (the rest: reduction, optimizer, gathers)\n",
      record.seconds > 0 ? 100 * (total_fwd + total_bwd + total_recompute) / record.seconds : 0.0);
  if (fp.detailed && fp.module_depth != 0) {
    add("\n%5s  %-24s %10s %11s %12s %14s %12s %14s\n", "layer", "kind", "params", "fwd FLOPs",
        "fwd latency", "fwd FLOP/s", "bwd latency", "bwd FLOP/s");
    for (const Row &r : rows)
      add("%5zu  %-24s %10s %11s %12s %14s %12s %14s\n", r.layer, r.kind.c_str(),
          FormatCount(double(r.params)).c_str(), FormatCount(r.fwd_flops).c_str(),
          FormatSeconds(r.fwd_s).c_str(), FlopsPerSecond(r.fwd_flops, r.fwd_s).c_str(),
          FormatSeconds(r.bwd_s).c_str(), FlopsPerSecond(2 * r.fwd_flops, r.bwd_s).c_str());
  }
  if (fp.top_modules > 0 && fp.module_depth != 0) {
    std::vector<const Row *> order;
    for (const Row &r : rows) order.push_back(&r);
    std::stable_sort(order.begin(), order.end(), [](const Row *a, const Row *b) {
      return a->fwd_s + a->bwd_s > b->fwd_s + b->bwd_s;
    });
    add("\ntop %lld layers by fwd+bwd latency:",
        static_cast<long long>(std::min<int64_t>(fp.top_modules, int64_t(order.size()))));
    for (int64_t k = 0; k < fp.top_modules && k < int64_t(order.size()); ++k)
      add(" %zu (%s, %s)", order[size_t(k)]->layer, order[size_t(k)]->kind.c_str(),
          FormatSeconds(order[size_t(k)]->fwd_s + order[size_t(k)]->bwd_s).c_str());
    add("\n");
  }
  add("-----------------------------------------------------------------------------\n");
  return out;
}

}  // namespace dst
