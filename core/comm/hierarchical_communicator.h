// communication.topology "hierarchical": a group's sums in three levels —
// reduce within each node (to the node's first member of the group), an
// all-reduce among those leaders (one per node: the only traffic between
// nodes), and a broadcast within each node — what multi-node jobs on slow
// inter-node links need. Every other operation (gathers, broadcasts,
// reduce-scatters, send/recv) runs on the group's flat communicator.
//
// The three levels of one sum run on a worker thread in submission order, so
// sums stay asynchronous (a bucket reduction overlaps backward) and every
// rank issues the levels' collectives in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/gloo_communicator.h"
#include "core/comm/store.h"

namespace dst {

// Nodes of a group's members: a member's node is the block of
// `local_world_size` consecutive global ranks it falls in (the layout of
// dstrain launch, torchrun, mpirun --map-by node... with equal ranks per node).
struct NodeSplit {
  std::vector<int64_t> local;    // members on this rank's node (global ranks, group order)
  std::vector<int64_t> leaders;  // the first member on each node
  bool is_leader = false;
};
NodeSplit SplitByNode(const std::vector<int64_t> &members, int64_t rank, int64_t local_world_size);

// Wraps `flat` (the group over `members`); connects the node-local and leader
// groups under `name` + "_local" / "_leaders". A group within one node (or of
// one rank per node) keeps the flat sums: there is no level to add.
Result<std::unique_ptr<Communicator>> MakeHierarchical(
    std::unique_ptr<Communicator> flat, Store *store, int64_t rank, const std::string &name,
    const std::vector<int64_t> &members, int64_t local_world_size, const GlooOptions &common);

}  // namespace dst
