#include "metrics/registry.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <cmath>
#include <exception>
#include <type_traits>
#include <utility>

namespace dst::metrics {

namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;

}  // namespace

template <typename V>
void MetricsRegistry::TotalCounter<V>::Advance(V total) {
  if constexpr (std::is_floating_point_v<V>) {
    if (!std::isfinite(total)) return;  // keep the baseline; a NaN total says nothing
  }
  if (total > last_total) counter->Increment(static_cast<double>(total - last_total));
  last_total = total;  // a smaller total moves the baseline only
}

MetricsRegistry::MetricsRegistry() : registry_(std::make_unique<prometheus::Registry>()) {}
MetricsRegistry::~MetricsRegistry() = default;

Result<std::unique_ptr<MetricsRegistry>> MetricsRegistry::Create(const RankIdentity &identity) {
  std::unique_ptr<MetricsRegistry> registry(new MetricsRegistry());
  // prometheus-cpp throws on an invalid name or label; keep it inside.
  try {
    registry->Build(identity);
  } catch (const std::exception &e) {
    return InvalidArgument(std::string("metrics registry: cannot build the series (") + e.what() +
                           "); check dstrain.monitor.job (1-128 characters of [A-Za-z0-9_.-])");
  }
  return registry;
}

void MetricsRegistry::Build(const RankIdentity &identity) {
  prometheus::Registry &r = *registry_;
  const prometheus::Labels labels = {{"job", identity.job},
                                     {"rank", std::to_string(identity.rank)},
                                     {"dp_rank", std::to_string(identity.dp_rank)},
                                     {"tp_rank", std::to_string(identity.tp_rank)},
                                     {"pp_rank", std::to_string(identity.pp_rank)}};
  auto counter = [&](const char *name, const char *help) -> Family<Counter> & {
    return BuildCounter().Name(name).Help(help).Labels(labels).Register(r);
  };
  auto gauge = [&](const char *name, const char *help) -> Family<Gauge> & {
    return BuildGauge().Name(name).Help(help).Labels(labels).Register(r);
  };

  steps_.counter = &counter("dstrain_steps_total", "Optimizer steps taken by this rank.").Add({});
  samples_.counter =
      &counter("dstrain_samples_total", "Training samples this rank has processed.").Add({});
  tokens_.counter =
      &counter("dstrain_tokens_total", "Training tokens this rank has processed (GPT models).")
           .Add({});
  skipped_.counter = &counter("dstrain_skipped_steps_total",
                              "Optimizer steps skipped because of an fp16 gradient overflow.")
                          .Add({});
  timer_total_family_ = &counter(
      "dstrain_timer_seconds_total",
      "Wall-clock seconds spent in each phase of the training step (DeepSpeed timer names).");
  timer_last_family_ = &gauge("dstrain_timer_seconds",
                              "Wall-clock seconds of each phase of the last training step "
                              "(DeepSpeed timer names; *_microstep are per-micro-step means).");

  auto &ops = counter("dstrain_comm_operations_total", "Collective operations issued, by type.");
  auto &bytes = counter("dstrain_comm_bytes_total", "Payload bytes of collective operations.");
  auto &seconds =
      counter("dstrain_comm_seconds_total", "Seconds spent in collective operations, by type.");
  auto &busbw = gauge("dstrain_comm_bus_bandwidth_bytes_per_second",
                      "Bus bandwidth of the last step's collectives (nccl-tests definition).");
  for (size_t i = 0; i < kCommOpNames.size(); ++i) {
    const prometheus::Labels op = {{"op", kCommOpNames[i]}};
    comm_[i].operations.counter = &ops.Add(op);
    comm_[i].bytes.counter = &bytes.Add(op);
    comm_[i].seconds.counter = &seconds.Add(op);
    comm_[i].bus_bandwidth = &busbw.Add(op);
  }
  // The same per process group (dp, tp, pp): tensor-parallel collectives
  // apart from the data-parallel ones, each with its group's bus bandwidth.
  auto &group_ops = counter("dstrain_comm_group_operations_total",
                            "Collective operations issued, by process group and type.");
  auto &group_bytes = counter("dstrain_comm_group_bytes_total",
                              "Payload bytes of collective operations, by process group and type.");
  auto &group_seconds =
      counter("dstrain_comm_group_seconds_total",
              "Seconds spent in collective operations, by process group and type.");
  auto &group_busbw = gauge("dstrain_comm_group_bus_bandwidth_bytes_per_second",
                            "Bus bandwidth of the last step's collectives of a process group "
                            "(nccl-tests definition, the group's size).");
  for (size_t g = 0; g < kCommGroupNames.size(); ++g)
    for (size_t i = 0; i < kCommOpNames.size(); ++i) {
      const prometheus::Labels labels = {{"group", kCommGroupNames[g]}, {"op", kCommOpNames[i]}};
      OpSeries &series = comm_by_group_[g][i];
      series.operations.counter = &group_ops.Add(labels);
      series.bytes.counter = &group_bytes.Add(labels);
      series.seconds.counter = &group_seconds.Add(labels);
      series.bus_bandwidth = &group_busbw.Add(labels);
    }

  auto &mem =
      gauge("dstrain_memory_bytes", "Bytes currently allocated by the engine, by category.");
  auto &peak = gauge("dstrain_memory_peak_bytes",
                     "Largest number of bytes allocated by the engine so far, by category.");
  for (size_t i = 0; i < kMemoryCategoryNames.size(); ++i) {
    const prometheus::Labels category = {{"category", kMemoryCategoryNames[i]}};
    memory_[i].current = &mem.Add(category);
    memory_[i].peak = &peak.Add(category);
  }
  device_memory_.current =
      &gauge("dstrain_device_memory_bytes",
             "Of dstrain_memory_bytes, the bytes in the training device's memory (0 on the CPU).")
           .Add({});
  device_memory_.peak =
      &gauge("dstrain_device_memory_peak_bytes", "Largest dstrain_device_memory_bytes so far.")
           .Add({});

  gauge("dstrain_world_size", "Number of processes (ranks) in the job.")
      .Add({})
      .Set(static_cast<double>(identity.world_size));
  auto &offload = gauge("dstrain_offload_info",
                        "ZeRO-Offload's device per tier (1); moved=\"false\": the CPU engine keeps "
                        "the state in host memory already, nothing is copied; \"true\": it lives "
                        "on NVMe, moved through io_engine.");
  for (const auto &[tier, device] : {std::pair{"optimizer", &identity.offload_optimizer},
                                     std::pair{"param", &identity.offload_param}}) {
    const bool moved = *device == "nvme";
    offload
        .Add({{"tier", tier},
              {"device", *device},
              {"moved", moved ? "true" : "false"},
              {"io_engine", moved ? identity.offload_io_engine : ""}})
        .Set(1);
  }
  auto &io_bytes = counter(
      "dstrain_offload_io_bytes_total",
      "Bytes the NVMe tiers (optimizer state and ZeRO-3 parameters) read and wrote, by op.");
  offload_read_.counter = &io_bytes.Add({{"op", "read"}});
  offload_write_.counter = &io_bytes.Add({{"op", "write"}});
  auto &compressed = counter(
      "dstrain_gradient_compression_bytes_total",
      "gradient_compression: bytes of this rank's encoded gradient buckets (kind=payload) and "
      "the fp32 bytes of those buckets (kind=dense); their ratio is the traffic saved.");
  compression_payload_.counter = &compressed.Add({{"kind", "payload"}});
  compression_dense_.counter = &compressed.Add({{"kind", "dense"}});
  offload_wait_.counter = &counter("dstrain_offload_io_wait_seconds_total",
                                   "Seconds training waited for NVMe I/O (not hidden behind "
                                   "compute), both tiers.")
                               .Add({});
}

void MetricsRegistry::BuildStepGauges() {
  prometheus::Registry &r = *registry_;
  // The const labels come from the family built in Build: reuse them.
  const prometheus::Labels labels = timer_last_family_->GetConstantLabels();
  auto gauge = [&](const char *name, const char *help) -> Gauge * {
    return &BuildGauge().Name(name).Help(help).Labels(labels).Register(r).Add({});
  };
  step_gauges_ = std::make_unique<StepGauges>(StepGauges{
      gauge("dstrain_loss", "Mean training loss of the last step."),
      gauge("dstrain_learning_rate", "Learning rate used by the last step."),
      gauge("dstrain_grad_norm", "Global gradient norm of the last step, before clipping."),
      gauge("dstrain_loss_scale", "Dynamic fp16 loss scale (1 without fp16)."),
      gauge("dstrain_step_time_seconds", "Wall-clock seconds of the last optimizer step."),
      gauge("dstrain_tokens_per_second", "Tokens this rank processed per second in the last step."),
      gauge("dstrain_samples_per_second",
            "Samples this rank processed per second in the last step."),
      gauge("dstrain_mfu_ratio",
            "Model FLOPs utilisation of the last step: achieved over peak FLOP/s (0 when the "
            "peak is unknown)."),
      gauge("dstrain_achieved_flops_per_second",
            "Model floating-point operations per second achieved in the last step."),
      gauge("dstrain_process_resident_memory_bytes", "Resident set size of the training process."),
      gauge("dstrain_last_step_timestamp_seconds",
            "Unix time in seconds at which the last optimizer step ended."),
      gauge("dstrain_step_compute_seconds",
            "Seconds the layers computed in the last step (gathers and reductions excluded); "
            "measured with communication.slow_node_tolerance, else 0."),
      gauge("dstrain_straggler",
            "1 when the last straggler check (communication.slow_node_tolerance) found this "
            "rank slower than the job's median compute time by more than the tolerance."),
  });
}

MetricsRegistry::TimerSeries &MetricsRegistry::Timer(const std::string &name) {
  auto it = timers_.find(name);
  if (it != timers_.end()) return it->second;
  const prometheus::Labels timer = {{"timer", name}};
  TimerSeries series{&timer_total_family_->Add(timer), &timer_last_family_->Add(timer)};
  return timers_.emplace(name, series).first->second;
}

void MetricsRegistry::Record(const StepSample &s) {
  if (!step_gauges_) BuildStepGauges();
  steps_.Advance(s.step);
  samples_.Advance(s.samples_total);
  tokens_.Advance(s.tokens_total);
  skipped_.Advance(s.skipped_steps_total);

  StepGauges &g = *step_gauges_;
  g.loss->Set(s.loss);
  g.lr->Set(s.lr);
  g.grad_norm->Set(s.grad_norm);
  g.loss_scale->Set(s.loss_scale);
  g.step_seconds->Set(s.step_seconds);
  g.tokens_per_second->Set(s.tokens_per_second);
  g.samples_per_second->Set(s.samples_per_second);
  g.mfu->Set(s.mfu);
  g.flops->Set(s.achieved_flops_per_second);
  g.rss->Set(static_cast<double>(s.process_rss_bytes));
  g.timestamp->Set(s.unix_time);
  g.compute_seconds->Set(s.compute_seconds);
  g.straggler->Set(s.straggler ? 1.0 : 0.0);

  // Timers are per-step values: the total grows by each step's value.
  for (const auto &[name, seconds] : s.timers) {
    TimerSeries &t = Timer(name);
    if (seconds > 0) t.total->Increment(seconds);
    t.last->Set(seconds);
  }
  auto advance = [](OpSeries &series, const CommOpSample &sample) {
    series.operations.Advance(sample.count);
    series.bytes.Advance(sample.bytes);
    series.seconds.Advance(sample.seconds);
    series.bus_bandwidth->Set(sample.bus_bandwidth);
  };
  for (size_t i = 0; i < comm_.size(); ++i) {
    advance(comm_[i], s.comm[i]);
    for (size_t g = 0; g < comm_by_group_.size(); ++g)
      advance(comm_by_group_[g][i], s.comm_by_group[g][i]);
  }
  offload_read_.Advance(s.offload_read_bytes_total);
  offload_write_.Advance(s.offload_write_bytes_total);
  offload_wait_.Advance(s.offload_io_wait_seconds_total);
  compression_payload_.Advance(s.compression_payload_bytes_total);
  compression_dense_.Advance(s.compression_dense_bytes_total);
  for (size_t i = 0; i < memory_.size(); ++i) {
    memory_[i].current->Set(static_cast<double>(s.memory[i].current_bytes));
    memory_[i].peak->Set(static_cast<double>(s.memory[i].peak_bytes));
  }
  device_memory_.current->Set(static_cast<double>(s.device_memory.current_bytes));
  device_memory_.peak->Set(static_cast<double>(s.device_memory.peak_bytes));
}

std::string MetricsRegistry::Exposition() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace dst::metrics
