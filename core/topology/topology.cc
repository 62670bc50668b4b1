#include "core/topology/topology.h"

namespace dst {

std::vector<int64_t> Topology::DataParallelGroup(int64_t rank) const {
  GridCoord c = CoordOf(rank);
  std::vector<int64_t> group;
  for (c.dp = 0; c.dp < dp_; ++c.dp) group.push_back(RankOf(c));
  return group;
}

std::vector<int64_t> Topology::TensorParallelGroup(int64_t rank) const {
  GridCoord c = CoordOf(rank);
  std::vector<int64_t> group;
  for (c.tp = 0; c.tp < tp_; ++c.tp) group.push_back(RankOf(c));
  return group;
}

std::vector<int64_t> Topology::PipelineGroup(int64_t rank) const {
  GridCoord c = CoordOf(rank);
  std::vector<int64_t> group;
  for (c.pp = 0; c.pp < pp_; ++c.pp) group.push_back(RankOf(c));
  return group;
}

}  // namespace dst
