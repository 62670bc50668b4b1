// The Gloo backend: CPU collectives over TCP (works across hosts), with the
// ranks' addresses exchanged through our rendezvous Store. Collectives run in
// order on one communication thread per group, so backward keeps computing
// while buckets are reduced.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/common/abort_signal.h"
#include "core/comm/store.h"

namespace dst {

struct GlooOptions {
  std::string name = "world";  // group name, for messages (and store keys)
  std::string store_prefix;    // unique per group in the job ("" = name)
  int64_t rank = 0;            // rank within the group
  int64_t size = 1;            // ranks in the group
  std::string bind_host;       // address peers reach this rank at ("" = detect)
  std::string master_addr;     // used to detect bind_host when it is empty
  std::chrono::milliseconds timeout{300000};
  // The job's ranks of the group, in group order. When given, a rank that
  // waits in an operation of the group watches the others' heartbeats
  // (heartbeat.h) and fails the operation, naming the peer, once one has
  // not beaten for max(1.5 s, timeout / 2): a stopped peer is found well
  // within the timeout instead of after several read timeouts.
  std::vector<int64_t> global_ranks;
  // communication.topology "ring": sums (all-reduce, reduce) run Gloo's ring
  // algorithm instead of halving-doubling (the default, "tree").
  bool ring_sums = false;
  // Raised by dst_engine_abort: a wait in an operation of the group returns
  // kAborted within 100 ms, and the group's connections close when it goes
  // (null: never raised).
  std::shared_ptr<const AbortSignal> abort;
};

// Connects the full mesh of the group. Errors name the group and the cause.
Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(Store &store,
                                                             const GlooOptions &options);

// The local address that routes to `master_addr` (loopback for loopback).
std::string DetectBindHost(const std::string &master_addr);

}  // namespace dst
