// This rank's process groups, built from the rank grid (core/topology):
// tensor parallelism fastest-varying, then data parallelism, then pipeline
// stages, as Megatron-LM lays them out. Each group is its own communicator
// (a group of one is the SoloCommunicator) connected through the rendezvous
// store under a key prefix naming its members, so groups never collide.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/gloo_communicator.h"
#include "core/comm/store.h"
#include "core/common/status.h"
#include "core/topology/topology.h"

namespace dst {

struct ProcessGroups {
  Topology topology{1, 1, 1};
  GridCoord coord;  // this rank's (pp, dp, tp)
  // Global ranks of each group, in group-rank order.
  std::vector<int64_t> dp_members, tp_members, pp_members;
  std::unique_ptr<Communicator> dp, tp, pp;
  // The pipeline's sends and receives: the same members as pp, its own
  // connections. Gloo shrinks a socket's send buffer to the message size when
  // a collective runs on it, after which a one-way 1 MB activation crawls at
  // one TCP segment per delayed ACK (40 ms): p2p traffic never shares a
  // socket with collectives.
  std::unique_ptr<Communicator> pp_p2p;
};

// "dp[0,2,4,6]": a group's name with its members (its store prefix).
std::string GroupKey(const std::string &name, const std::vector<int64_t> &members);

// The options `rank` connects group `name` of `members` with: `common`'s
// with the name, store prefix (GroupKey), rank and size filled in.
GlooOptions GroupOptions(int64_t rank, const std::string &name, const std::vector<int64_t> &members,
                         const GlooOptions &common);

// The group names and members of a rank's groups, with where each is kept.
struct GroupSlot {
  const char *name;
  const std::vector<int64_t> *members;
  std::unique_ptr<Communicator> *comm;
};
std::vector<GroupSlot> GroupSlots(ProcessGroups *groups);

// Connects one group of `members` (global ranks, this `rank` among them) under
// `name` (unique in the job); a group of one is a solo communicator.
Result<std::unique_ptr<Communicator>> ConnectGroup(Store *store, int64_t rank,
                                                   const std::string &name,
                                                   const std::vector<int64_t> &members,
                                                   const GlooOptions &common);

// Connects this rank's dp, tp and pp groups (in that order on every rank, so
// the connections of different groups never wait on each other). `common`
// gives the bind address and the timeout; `rank` is the global rank.
Result<ProcessGroups> BuildProcessGroups(Store *store, int64_t rank, const Topology &topology,
                                         const GlooOptions &common);

}  // namespace dst
