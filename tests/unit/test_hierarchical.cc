// Hierarchical sums (communication.topology "hierarchical"): the node split
// of a group's members, and on 4 thread ranks as 2 nodes x 2 the three-level
// all-reduce and reduce (fp32 and bf16) equal the flat sums, several sums in
// flight finish in order, the completion hook sees one record per sum, and a
// group with one member per node keeps the flat communicator (and sums on it).
#include "core/comm/hierarchical_communicator.h"

#include <gtest/gtest.h>

#include <atomic>

#include "core/comm/process_groups.h"
#include "core/precision/convert.h"
#include "core/precision/half_ops.h"
#include "tests/unit/ranks_on_threads.h"

namespace dst {
namespace {

TEST(Hierarchical, SplitsAGroupByNode) {
  const NodeSplit a = SplitByNode({0, 1, 2, 3, 4, 5}, 4, 2);
  EXPECT_EQ(a.local, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(a.leaders, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_TRUE(a.is_leader);
  const NodeSplit b = SplitByNode({1, 3, 5, 7}, 7, 4);  // a dp group of a tp-2 layout
  EXPECT_EQ(b.local, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(b.leaders, (std::vector<int64_t>{1, 5}));
  EXPECT_FALSE(b.is_leader);
}

TEST(Hierarchical, ThreeLevelSumsEqualTheFlatOnesOnTwoNodesOfTwo) {
  const std::vector<int64_t> members = {0, 1, 2, 3};
  std::atomic<int> records{0};
  test::RunRanks(4, [&](int64_t rank, Store &store) {
    auto flat = ConnectGroup(&store, rank, "dp", members, test::Common());
    ASSERT_TRUE(flat.ok()) << flat.status().message();
    auto h =
        MakeHierarchical(std::move(flat).value(), &store, rank, "dp", members, 2, test::Common());
    ASSERT_TRUE(h.ok()) << h.status().message();
    Communicator &c = *h.value();
    c.SetCompletionHook([&](const CommRecord &r) {
      if (r.op == CommOp::kAllReduce || r.op == CommOp::kReduce) ++records;
    });
    // Three sums in flight at once, then waited for in order.
    std::vector<std::vector<float>> data(3, std::vector<float>(1000));
    std::vector<std::unique_ptr<Work>> works;
    for (size_t k = 0; k < 3; ++k) {
      for (size_t i = 0; i < 1000; ++i) data[k][i] = float((rank + 1) * (i % 13 + k));
      works.push_back(k == 1 ? c.ReduceSum(data[k].data(), 1000, 2)
                             : c.AllReduceSum(data[k].data(), 1000));
    }
    for (auto &w : works) ASSERT_TRUE(w->Wait().ok());
    for (size_t k = 0; k < 3; ++k)
      for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(data[k][i], float(10 * (i % 13 + k))) << k;
    std::vector<uint16_t> half(64);
    for (size_t i = 0; i < 64; ++i) half[i] = FloatToBFloat16(float(rank + i));
    ASSERT_TRUE(c.AllReduceSum16(half.data(), 64, Half::kBf16)->Wait().ok());
    for (size_t i = 0; i < 64; ++i) EXPECT_EQ(BFloat16ToFloat(half[i]), float(6 + 4 * i)) << i;
  });
  EXPECT_EQ(records.load(), 4 * 4);  // 4 sums on each of 4 ranks
}

TEST(Hierarchical, OneMemberPerNodeKeepsTheFlatGroup) {
  // Each rank's group is closed only after both ranks are done (the engine's
  // closing handshake does this in a job): Gloo's listening side may accept,
  // or read a sum's last bytes, after the other side has returned, and a peer
  // closing then fails the operation even though all its bytes arrived.
  std::vector<std::unique_ptr<Communicator>> kept(2);
  test::RunRanks(2, [&](int64_t rank, Store &store) {
    auto flat = ConnectGroup(&store, rank, "dp", {0, 1}, test::Common());
    ASSERT_TRUE(flat.ok()) << flat.status().message();
    Communicator *raw = flat.value().get();
    auto h =
        MakeHierarchical(std::move(flat).value(), &store, rank, "dp", {0, 1}, 1, test::Common());
    ASSERT_TRUE(h.ok()) << h.status().message();
    EXPECT_EQ(h.value().get(), raw);
    float x = float(rank + 1);
    const Status sum = h.value()->AllReduceSum(&x, 1)->Wait();
    ASSERT_TRUE(sum.ok()) << sum.message();
    EXPECT_EQ(x, 3.0f);
    kept[size_t(rank)] = std::move(h).value();
  });
}

}  // namespace
}  // namespace dst
