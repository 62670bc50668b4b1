#include "core/engine/job.h"
#include "core/common/log.h"
#include "core/common/test_hooks.h"

#include <cstdlib>
#include <sstream>

#include "core/comm/gloo_communicator.h"
#include "core/comm/hierarchical_communicator.h"

namespace dst {

std::chrono::milliseconds CommTimeoutOf(const Config &config) {
  return std::chrono::milliseconds(int64_t(config.runtime.comm_timeout_seconds * 1000.0));
}

Result<Job> JoinJob(const LaunchEnv &env, const Config &config, const std::string &agreement,
                    std::shared_ptr<AbortSignal> abort) {
  Job job;
  job.abort = abort;
  job.env = env;
  SetLogRank(env.rank);
  const Topology topology(config.pp_size, config.dp_size, config.tp_size);
  if (topology.world_size() != env.world_size)
    return ConfigError("the job has " + std::to_string(env.world_size) + " ranks but pp_size " +
                       std::to_string(config.pp_size) + " x dp_size " +
                       std::to_string(config.dp_size) + " x tp_size " +
                       std::to_string(config.tp_size) + " = " +
                       std::to_string(topology.world_size()));
  GlooOptions common;
  common.timeout = CommTimeoutOf(config);
  common.ring_sums = config.communication.topology == "ring";
  common.abort = abort;
  if (env.world_size > 1) {
    TcpStoreOptions store_options;
    store_options.host = env.master_addr;
    store_options.port = env.master_port;
    store_options.is_server = env.rank == 0;
    store_options.rank = env.rank;
    store_options.world_size = env.world_size;
    store_options.job_token = env.job_token;
    store_options.timeout = CommTimeoutOf(config);
    store_options.abort = abort;
    DST_LOG(kDebug, "rendezvous",
            (env.rank == 0 ? "hosting" : "joining") + std::string(" the store at ") +
                env.master_addr + ":" + std::to_string(env.master_port) + " for " +
                std::to_string(env.world_size) + " ranks");
    Result<std::unique_ptr<Store>> connected = ConnectTcpStore(store_options);
    if (!connected.ok()) return connected.status();
    DST_LOG(kDebug, "rendezvous", "store connected; comparing configs");
    job.store = std::move(connected).value();
    DST_RETURN_IF_ERROR(
        CheckSameConfig(*job.store, env.rank, env.world_size, agreement, CommTimeoutOf(config)));
    DST_LOG(kDebug, "rendezvous", "every rank runs the same config and model");
    job.heartbeat = std::make_unique<Heartbeat>(job.store.get(), env.rank, abort);
    const char *bind = std::getenv("DSTRAIN_BIND_ADDR");
    common.bind_host = bind ? bind : "";
    common.master_addr = env.master_addr;
  }
  Result<ProcessGroups> groups = BuildProcessGroups(job.store.get(), env.rank, topology, common);
  if (!groups.ok()) return groups.status();
  job.groups = std::move(groups).value();
  job.common = common;
  // communication.topology "hierarchical": the data-parallel sums in three
  // levels (node, leaders, node); the other groups stay within a node in
  // the usual layouts (tp inside, pp across).
  if (config.communication.topology == "hierarchical" && env.world_size > 1) {
    Result<std::unique_ptr<Communicator>> dp =
        MakeHierarchical(std::move(job.groups.dp), job.store.get(), env.rank, "dp",
                         job.groups.dp_members, env.local_world_size, common);
    if (!dp.ok()) return dp.status();
    job.groups.dp = std::move(dp).value();
  }
  DST_LOG(kInfo, "job",
          "joined: rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
              ", (pp, dp, tp) = (" + std::to_string(job.groups.coord.pp) + ", " +
              std::to_string(job.groups.coord.dp) + ", " + std::to_string(job.groups.coord.tp) +
              ")");
  return job;
}

// Fault injection for tests of the overflow path (documented in docs/concepts/precision.md):
// DSTRAIN_INJECT_GRAD_OVERFLOW="R:S[,R:S...]" makes rank R's gradients
// infinite in step S (counted from 0), as an fp16 overflow would.
Result<std::vector<int64_t>> ParseOverflowInjection(int64_t rank) {
  std::vector<int64_t> steps;
#if !DSTRAIN_TEST_HOOKS
  (void)rank;
  return steps;
#else
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
#endif
}

Result<double> ParseSlowRankInjection(int64_t rank) {
#if !DSTRAIN_TEST_HOOKS
  (void)rank;
  return 0.0;
#else
  const char *text = std::getenv("DSTRAIN_INJECT_SLOW_RANK");
  if (text == nullptr || *text == '\0') return 0.0;
  std::stringstream in(text);
  std::string item;
  double seconds = 0;
  while (std::getline(in, item, ',')) {
    long long r = -1;
    double ms = -1;
    char colon = 0;
    std::stringstream pair(item);
    if (!(pair >> r >> colon >> ms) || colon != ':' || r < 0 || ms < 0 || !pair.eof())
      return InvalidArgument("DSTRAIN_INJECT_SLOW_RANK=\"" + std::string(text) +
                             "\": expected rank:milliseconds pairs separated by commas, e.g. "
                             "\"1:20\"");
    if (r == rank) seconds += ms / 1000.0;
  }
  return seconds;
#endif
}

}  // namespace dst
