#include "core/comm/process_groups.h"
#include "core/common/log.h"

#include <algorithm>

namespace dst {

std::string GroupKey(const std::string &name, const std::vector<int64_t> &members) {
  std::string key = name + "[";
  for (size_t i = 0; i < members.size(); ++i) {
    if (i > 0) key += ',';
    key += std::to_string(members[i]);
  }
  return key + "]";
}

GlooOptions GroupOptions(int64_t rank, const std::string &name, const std::vector<int64_t> &members,
                         const GlooOptions &common) {
  GlooOptions options = common;
  options.name = name;
  options.store_prefix = GroupKey(name, members);
  options.global_ranks = members;
  options.rank = std::find(members.begin(), members.end(), rank) - members.begin();
  options.size = int64_t(members.size());
  return options;
}

std::vector<GroupSlot> GroupSlots(ProcessGroups *groups) {
  return {GroupSlot{"dp", &groups->dp_members, &groups->dp},
          GroupSlot{"tp", &groups->tp_members, &groups->tp},
          GroupSlot{"pp", &groups->pp_members, &groups->pp},
          GroupSlot{"pp_p2p", &groups->pp_members, &groups->pp_p2p}};
}

Result<std::unique_ptr<Communicator>> ConnectGroup(Store *store, int64_t rank,
                                                   const std::string &name,
                                                   const std::vector<int64_t> &members,
                                                   const GlooOptions &common) {
  if (members.size() == 1) return MakeSoloCommunicator(name);
  DST_LOG(kDebug, "groups", "connecting " + GroupKey(name, members));
  const GlooOptions options = GroupOptions(rank, name, members, common);
  Result<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(*store, options);
  DST_LOG(kDebug, "groups",
          GroupKey(name, members) +
              (comm.ok() ? std::string(" connected") + (options.ring_sums ? " (ring sums)" : "")
                         : ": " + comm.status().message()));
  return comm;
}

Result<ProcessGroups> BuildProcessGroups(Store *store, int64_t rank, const Topology &topology,
                                         const GlooOptions &common) {
  const int64_t world = topology.world_size();
  if (rank < 0 || rank >= world)
    return InvalidArgument(
        "rank " + std::to_string(rank) + " is outside the " + std::to_string(topology.pp_size()) +
        " x " + std::to_string(topology.dp_size()) + " x " + std::to_string(topology.tp_size()) +
        " (pp x dp x tp) grid of " + std::to_string(world) + " ranks");
  if (world > 1 && store == nullptr)
    return InternalError("process groups of a " + std::to_string(world) +
                         "-rank job need the rendezvous store");
  ProcessGroups groups;
  groups.topology = topology;
  groups.coord = topology.CoordOf(rank);
  groups.dp_members = topology.DataParallelGroup(rank);
  groups.tp_members = topology.TensorParallelGroup(rank);
  groups.pp_members = topology.PipelineGroup(rank);
  for (const GroupSlot &slot : GroupSlots(&groups)) {
    Result<std::unique_ptr<Communicator>> comm =
        ConnectGroup(store, rank, slot.name, *slot.members, common);
    if (!comm.ok()) return comm.status();
    *slot.comm = std::move(comm).value();
  }
  return groups;
}

}  // namespace dst
