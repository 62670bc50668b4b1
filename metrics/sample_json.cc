// IdentityToJson / SampleToJson (declared in monitor.h): the JSON shapes of
// the HTTP API and of the JSON-lines log.
#include "metrics/monitor.h"

namespace dst::metrics {

nlohmann::json IdentityToJson(const RankIdentity &id) {
  return nlohmann::json{{"job", id.job},
                        {"rank", id.rank},
                        {"local_rank", id.local_rank},
                        {"world_size", id.world_size},
                        {"dp_rank", id.dp_rank},
                        {"tp_rank", id.tp_rank},
                        {"pp_rank", id.pp_rank}};
}

nlohmann::json TimelineToJson(const std::vector<TimelineEvent> &timeline) {
  nlohmann::json out = nlohmann::json::array();
  for (const TimelineEvent &e : timeline)
    out.push_back({{"op", e.op},
                   {"micro_batch", e.micro_batch},
                   {"chunk", e.chunk},
                   {"start", e.start},
                   {"end", e.end}});
  return out;
}

nlohmann::json SampleToJson(const StepSample &s) {
  nlohmann::json j = nlohmann::json::object();
  j["step"] = s.step;
  j["samples_total"] = s.samples_total;
  j["tokens_total"] = s.tokens_total;
  j["loss"] = s.loss;
  j["lr"] = s.lr;
  j["grad_norm"] = s.grad_norm;
  j["loss_scale"] = s.loss_scale;
  j["skipped_steps_total"] = s.skipped_steps_total;
  j["step_seconds"] = s.step_seconds;
  j["tokens_per_second"] = s.tokens_per_second;
  j["samples_per_second"] = s.samples_per_second;
  j["mfu"] = s.mfu;
  j["achieved_flops_per_second"] = s.achieved_flops_per_second;
  nlohmann::json timers = nlohmann::json::object();
  for (const auto &[name, seconds] : s.timers) timers[name] = seconds;
  j["timers"] = std::move(timers);
  nlohmann::json comm = nlohmann::json::object();
  for (size_t i = 0; i < kCommOpNames.size(); ++i) {
    const CommOpSample &op = s.comm[i];
    comm[kCommOpNames[i]] = {{"count", op.count},
                             {"bytes", op.bytes},
                             {"seconds", op.seconds},
                             {"bus_bandwidth", op.bus_bandwidth}};
  }
  j["comm"] = std::move(comm);
  nlohmann::json by_group = nlohmann::json::object();
  for (size_t g = 0; g < kCommGroupNames.size(); ++g)
    for (size_t i = 0; i < kCommOpNames.size(); ++i) {
      const CommOpSample &op = s.comm_by_group[g][i];
      if (op.count == 0) continue;  // the groups' ops that ran
      by_group[kCommGroupNames[g]][kCommOpNames[i]] = {{"count", op.count},
                                                       {"bytes", op.bytes},
                                                       {"seconds", op.seconds},
                                                       {"bus_bandwidth", op.bus_bandwidth}};
    }
  j["comm_by_group"] = std::move(by_group);
  nlohmann::json memory = nlohmann::json::object();
  for (size_t i = 0; i < kMemoryCategoryNames.size(); ++i) {
    memory[kMemoryCategoryNames[i]] = {{"current_bytes", s.memory[i].current_bytes},
                                       {"peak_bytes", s.memory[i].peak_bytes}};
  }
  j["memory"] = std::move(memory);
  j["device_memory"] = {{"current_bytes", s.device_memory.current_bytes},
                        {"peak_bytes", s.device_memory.peak_bytes}};
  j["process_rss_bytes"] = s.process_rss_bytes;
  j["gradient_compression"] = {{"payload_bytes_total", s.compression_payload_bytes_total},
                               {"dense_bytes_total", s.compression_dense_bytes_total}};
  j["compute_seconds"] = s.compute_seconds;
  j["straggler"] = s.straggler;
  j["straggler_slower_by"] = s.straggler_slower_by;
  j["unix_time"] = s.unix_time;
  return j;
}

}  // namespace dst::metrics
