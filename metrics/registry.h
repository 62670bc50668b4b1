// MetricsRegistry: one rank's Prometheus series, on prometheus-cpp. Every
// series carries the const labels job, rank, dp_rank, tp_rank, pp_rank; names
// follow the Prometheus conventions (base units, counters end in _total):
//
//   counters  dstrain_steps_total, dstrain_samples_total, dstrain_tokens_total,
//             dstrain_skipped_steps_total, dstrain_timer_seconds_total{timer},
//             dstrain_comm_operations_total{op}, dstrain_comm_bytes_total{op},
//             dstrain_comm_seconds_total{op},
//             dstrain_comm_group_{operations,bytes,seconds}_total{group,op}
//   gauges    dstrain_loss, dstrain_learning_rate, dstrain_grad_norm,
//             dstrain_loss_scale, dstrain_step_time_seconds,
//             dstrain_tokens_per_second, dstrain_samples_per_second,
//             dstrain_mfu_ratio, dstrain_achieved_flops_per_second,
//             dstrain_timer_seconds{timer}, dstrain_comm_bus_bandwidth_bytes_per_second{op},
//             dstrain_comm_group_bus_bandwidth_bytes_per_second{group,op},
//             dstrain_memory_bytes{category}, dstrain_memory_peak_bytes{category},
//             dstrain_process_resident_memory_bytes, dstrain_world_size,
//             dstrain_last_step_timestamp_seconds
//
// A StepSample carries totals since the engine started; the counters advance
// by the difference from the previous sample and never go down (a smaller
// total, e.g. after loading an earlier checkpoint, only resets the baseline).
// The per-step gauges (loss, rates, timers, ...) appear with the first sample,
// so a scrape before it does not read a loss of 0.
//
// Threads: Record from one thread at a time (Monitor serialises it);
// Exposition from any thread (the prometheus-cpp registry is thread-safe).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/common/status.h"
#include "metrics/step_sample.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace dst::metrics {

class MetricsRegistry {
 public:
  // Builds every family and the series known up front (all comm ops and
  // memory categories, the step counters, the world size).
  static Result<std::unique_ptr<MetricsRegistry>> Create(const RankIdentity &identity);
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry &) = delete;
  MetricsRegistry &operator=(const MetricsRegistry &) = delete;

  // Pushes one step into the series.
  void Record(const StepSample &sample);

  // Prometheus text exposition (format 0.0.4) of every series.
  std::string Exposition() const;

  prometheus::Registry &registry() { return *registry_; }

 private:
  // A counter fed from a running total: remembers the total it last saw.
  template <typename V>
  struct TotalCounter {
    prometheus::Counter *counter = nullptr;
    V last_total{};
    void Advance(V total);
  };
  struct OpSeries {
    TotalCounter<int64_t> operations, bytes;
    TotalCounter<double> seconds;
    prometheus::Gauge *bus_bandwidth = nullptr;
  };
  struct MemorySeries {
    prometheus::Gauge *current = nullptr, *peak = nullptr;
  };
  struct TimerSeries {
    prometheus::Counter *total = nullptr;
    prometheus::Gauge *last = nullptr;
  };
  // The scalar per-step gauges, built on the first Record.
  struct StepGauges {
    prometheus::Gauge *loss, *lr, *grad_norm, *loss_scale, *step_seconds, *tokens_per_second,
        *samples_per_second, *mfu, *flops, *rss, *timestamp, *compute_seconds, *straggler;
  };

  MetricsRegistry();
  void Build(const RankIdentity &identity);
  void BuildStepGauges();
  TimerSeries &Timer(const std::string &name);

  std::unique_ptr<prometheus::Registry> registry_;
  // Families owned by registry_ (prometheus-cpp hands out references).
  prometheus::Family<prometheus::Counter> *timer_total_family_ = nullptr;
  prometheus::Family<prometheus::Gauge> *timer_last_family_ = nullptr;

  TotalCounter<int64_t> steps_, samples_, tokens_, skipped_;
  TotalCounter<int64_t> offload_read_, offload_write_;  // dstrain_offload_io_bytes_total{op}
  // dstrain_gradient_compression_bytes_total{kind="payload"|"dense"}
  TotalCounter<int64_t> compression_payload_, compression_dense_;
  TotalCounter<double> offload_wait_;
  std::array<OpSeries, kCommOpNames.size()> comm_{};
  // [group][op]: dstrain_comm_group_*{group, op}.
  std::array<std::array<OpSeries, kCommOpNames.size()>, kCommGroupNames.size()> comm_by_group_{};
  std::array<MemorySeries, kMemoryCategoryNames.size()> memory_{};
  MemorySeries device_memory_;  // dstrain_device_memory_bytes (unlabelled)
  std::map<std::string, TimerSeries, std::less<>> timers_;
  std::unique_ptr<StepGauges> step_gauges_;
};

}  // namespace dst::metrics
