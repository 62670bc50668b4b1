// Joining a job: the rendezvous store (rank 0 hosts it), the check that
// every rank parsed the same config and model, and this rank's process
// groups. Also the fault-injection hooks read from the environment.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/heartbeat.h"
#include "core/comm/launch_env.h"
#include "core/comm/process_groups.h"
#include "core/comm/store.h"
#include "core/common/status.h"
#include "core/config/config.h"

namespace dst {

// One rank's membership of the job.
struct Job {
  LaunchEnv env;
  std::unique_ptr<Store> store;          // null on a single-rank job
  std::unique_ptr<Heartbeat> heartbeat;  // this rank's liveness, with the store
  ProcessGroups groups;                  // dp, tp, pp from the (pp, dp, tp) grid of the config
  GlooOptions common;                    // bind address and timeout the groups connected with
  std::shared_ptr<AbortSignal> abort;    // raised by dst_engine_abort; never null
};

// dstrain.comm_timeout_seconds as a duration.
std::chrono::milliseconds CommTimeoutOf(const Config &config);

// Connects to the job `env` describes; `agreement` is the text every rank
// must have parsed identically (the resolved config and the model spec).
// `abort` reaches the store, the heartbeat and every group.
Result<Job> JoinJob(const LaunchEnv &env, const Config &config, const std::string &agreement,
                    std::shared_ptr<AbortSignal> abort = std::make_shared<AbortSignal>());

// Test hooks, read only in a build with DSTRAIN_TEST_HOOKS (empty otherwise).
// DSTRAIN_INJECT_GRAD_OVERFLOW="R:S[,R:S...]": the steps at which `rank`'s
// gradients are made infinite, as an fp16 overflow would (tests).
Result<std::vector<int64_t>> ParseOverflowInjection(int64_t rank);

// DSTRAIN_INJECT_SLOW_RANK="R:MS[,R:MS...]": rank R's steps take MS
// milliseconds longer, counted as compute (tests of straggler detection).
Result<double> ParseSlowRankInjection(int64_t rank);

}  // namespace dst
