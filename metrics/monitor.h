// Monitor: what the engine owns when dstrain.monitor is enabled. It bundles
// the per-rank registry (registry.h, on prometheus-cpp), the history of the
// last N steps, the CSV / JSON-lines log (log.h) and the HTTP server
// (http_server.h, on CivetWeb). The engine calls OnStep after every
// optimizer step from its own thread; the HTTP server only reads.
//
// HTTP API (GET only; every answer is JSON unless said otherwise):
//   /metrics            Prometheus text exposition of this rank's registry
//   /api/v1/snapshot    {"identity": Identity, "sample": Sample | null}
//   /api/v1/history     {"identity": Identity, "steps": [Sample, ...]} oldest
//                       first; ?last=N keeps the newest N
//   /api/v1/ranks       {"ranks": [{"identity": Identity, "sample": Sample | null,
//                       "age_seconds": x}, ...]}: on rank 0 every rank of the job
//                       (published every steps_per_print steps), elsewhere this rank
//   /api/v1/config      the resolved config (the token redacted)
//   /                   the dashboard (index.html); /assets/<file> its files
// Identity = {"job", "rank", "local_rank", "world_size", "dp_rank", "tp_rank", "pp_rank"}
// Sample   = StepSample as JSON (SampleToJson): the scalar fields by name,
//            "timers": {name: seconds}, "comm": {op: {"count", "bytes",
//            "seconds", "bus_bandwidth"}}, "memory": {category:
//            {"current_bytes", "peak_bytes"}}, "process_rss_bytes", "unix_time".
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/common/status.h"
#include "core/config/config.h"
#include "metrics/step_sample.h"

namespace dst::metrics {

nlohmann::json IdentityToJson(const RankIdentity &id);
nlohmann::json SampleToJson(const StepSample &sample);
// [{"op", "micro_batch", "chunk", "start", "end"}, ...]
nlohmann::json TimelineToJson(const std::vector<TimelineEvent> &timeline);

// Rank 0's job-wide table: the "ranks" array of /api/v1/ranks. Called from
// an HTTP worker thread; must be thread-safe.
using RankTableFn = std::function<nlohmann::json()>;

struct MonitorOptions {
  MonitorConfig config;  // http.port is the base port; the server adds local_rank
  RankIdentity identity;
  std::string config_json;  // resolved config served by /api/v1/config
  RankTableFn rank_table;   // may be empty: then /api/v1/ranks lists this rank only
};

class Monitor {
 public:
  // Opens the log and starts the HTTP server as configured. Errors name the
  // problem and the fix (port in use, unwritable log directory, ...).
  static Result<std::unique_ptr<Monitor>> Create(const MonitorOptions &options);
  ~Monitor();

  // Records one step: registry, history, log. Thread-safe against readers.
  Status OnStep(const StepSample &sample);

  // The port the HTTP server listens on (0 when HTTP is off).
  int http_port() const;
  // Prometheus text exposition of the registry (what /metrics serves).
  std::string PrometheusText() const;
  // What /api/v1/snapshot serves.
  nlohmann::json SnapshotJson() const;

 private:
  struct Impl;
  explicit Monitor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dst::metrics
