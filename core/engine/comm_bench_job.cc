#include "core/engine/comm_bench_job.h"

#include <nlohmann/json.hpp>

#include "core/comm/comm_bench.h"
#include "core/engine/job.h"

namespace dst {

namespace {

using nlohmann::json;

struct BenchRequest {
  std::string group = "dp";
  CommBenchOptions options;
};

Result<int64_t> PositiveOrZero(const json &value, const char *key) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0)
    return InvalidArgument(std::string("comm bench request: \"") + key + "\" is " + value.dump() +
                           ": expected a non-negative integer");
  return value.get<int64_t>();
}

Result<BenchRequest> ParseRequest(const std::string &text) {
  BenchRequest request;
  if (text.empty()) return request;
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object())
    return InvalidArgument("comm bench request: expected a JSON object, got: " + text);
  for (const auto &[key, value] : doc.items()) {
    if (key == "group") {
      request.group = value.is_string() ? value.get<std::string>() : "";
      if (request.group != "dp" && request.group != "tp" && request.group != "pp")
        return InvalidArgument("comm bench request: \"group\" is " + value.dump() +
                               ": use \"dp\", \"tp\" or \"pp\" (groups of the config's layout)");
    } else if (key == "ops") {
      std::string list;
      if (value.is_string()) list = value.get<std::string>();
      for (const json &item : value.is_array() ? value : json::array()) {
        if (!list.empty()) list.push_back(',');
        list.append(item.is_string() ? item.get<std::string>() : item.dump());
      }
      Result<std::vector<BenchOp>> ops = ParseBenchOps(list);
      if (!ops.ok()) return ops.status();
      request.options.ops = ops.value();
    } else {
      int64_t *field = key == "min_bytes"   ? &request.options.min_bytes
                       : key == "max_bytes" ? &request.options.max_bytes
                       : key == "factor"    ? &request.options.factor
                       : key == "iters"     ? &request.options.iters
                       : key == "warmup"    ? &request.options.warmup
                                            : nullptr;
      if (field == nullptr)
        return InvalidArgument("comm bench request: unknown key \"" + key +
                               "\" (known: group, ops, min_bytes, max_bytes, factor, iters, "
                               "warmup)");
      Result<int64_t> number = PositiveOrZero(value, key.c_str());
      if (!number.ok()) return number.status();
      *field = number.value();
    }
  }
  return request;
}

Communicator *GroupOf(Job &job, const std::string &name) {
  if (name == "tp") return job.groups.tp.get();
  if (name == "pp") return job.groups.pp.get();
  return job.groups.dp.get();
}

const std::vector<int64_t> &MembersOf(const Job &job, const std::string &name) {
  if (name == "tp") return job.groups.tp_members;
  if (name == "pp") return job.groups.pp_members;
  return job.groups.dp_members;
}

}  // namespace

Result<std::string> RunCommBenchJob(const std::string &config_text,
                                    const std::string &request_json) {
  Result<BenchRequest> request = ParseRequest(request_json);
  if (!request.ok()) return request.status();
  Result<LaunchEnv> env = DetectLaunchEnv();
  if (!env.ok()) return env.status();
  ConfigContext context;
  context.world_size = env.value().world_size;
  Result<Config> config = ParseConfig(
      config_text.empty() ? R"({"train_micro_batch_size_per_gpu": 1})" : config_text, context);
  if (!config.ok()) return config.status();
  // Before anyone connects: the same sizes are refused on every rank.
  Result<std::vector<int64_t>> sizes = BenchSizes(request.value().options, 1);
  if (!sizes.ok()) return sizes.status();
  Result<Job> joined = JoinJob(env.value(), config.value(),
                               config.value().resolved_json + "\ncomm-bench " + request_json);
  if (!joined.ok()) return joined.status();
  Job &job = joined.value();
  const std::string &name = request.value().group;
  Communicator *comm = GroupOf(job, name);
  Result<std::unique_ptr<Communicator>> p2p = ConnectGroup(
      job.store.get(), job.env.rank, "bench_p2p_" + name, MembersOf(job, name), job.common);
  Result<std::vector<CommBenchRow>> rows =
      p2p.ok() ? RunCommBench(*comm, *p2p.value(), request.value().options)
               : Result<std::vector<CommBenchRow>>(p2p.status());
  const int64_t ranks = comm->size();
  if (p2p.ok()) p2p.value().reset();
  job.groups = ProcessGroups{};
  job.heartbeat.reset();
  if (job.store)
    FinishJob(*job.store, job.env.rank, job.env.world_size,
              rows.ok() ? CommTimeoutOf(config.value()) : std::chrono::milliseconds(1000));
  if (!rows.ok()) return rows.status();
  return CommBenchJson(rows.value(), name, ranks, "gloo");
}

}  // namespace dst
