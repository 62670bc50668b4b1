#include <gtest/gtest.h>

#include "core/topology/topology.h"

namespace dst {
namespace {

TEST(Topology, TensorParallelIsFastestVarying) {
  Topology t(2, 3, 2);  // pp 2, dp 3, tp 2 = 12 ranks
  EXPECT_EQ(t.world_size(), 12);
  for (int64_t r = 0; r < 12; ++r) EXPECT_EQ(t.RankOf(t.CoordOf(r)), r);
  EXPECT_EQ(t.TensorParallelGroup(5), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(t.DataParallelGroup(5), (std::vector<int64_t>{1, 3, 5}));
  EXPECT_EQ(t.PipelineGroup(5), (std::vector<int64_t>{5, 11}));
  const GridCoord c = t.CoordOf(7);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.tp, 1);
}

TEST(Topology, PureDataParallel) {
  Topology t(1, 4, 1);
  EXPECT_EQ(t.DataParallelGroup(2), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(t.TensorParallelGroup(2), (std::vector<int64_t>{2}));
}

}  // namespace
}  // namespace dst
