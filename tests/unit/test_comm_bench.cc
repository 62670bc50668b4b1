// The comm bench: operation names, message sizes (rounded to whole elements
// per rank), a 3-rank run of every operation on threads with nccl-tests'
// busbw factors and no wrong elements, a corrupted all-reduce counted as
// wrong on every rank, and a one-rank group refused.
#include "core/comm/comm_bench.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/comm/process_groups.h"
#include "tests/unit/ranks_on_threads.h"

namespace dst {
namespace {

using test::Common;
using test::RunRanks;

TEST(CommBench, ParsesOperationNamesAndNamesTheKnownOnes) {
  Result<std::vector<BenchOp>> ops = ParseBenchOps("allreduce,sendrecv");
  ASSERT_TRUE(ops.ok());
  EXPECT_EQ(ops.value(), (std::vector<BenchOp>{BenchOp::kAllReduce, BenchOp::kSendRecv}));
  EXPECT_EQ(ParseBenchOps("all").value().size(), 6u);
  Result<std::vector<BenchOp>> bad = ParseBenchOps("allreduce,all_reduce");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"all_reduce\""), std::string::npos);
  EXPECT_NE(bad.status().message().find("reduce_scatter"), std::string::npos);
  EXPECT_FALSE(ParseBenchOps("").ok());
}

TEST(CommBench, SizesAreWholeElementsPerRankAndBadRangesAreNamed) {
  CommBenchOptions o;
  o.min_bytes = 1000;
  o.max_bytes = 100000;
  o.factor = 10;
  Result<std::vector<int64_t>> sizes = BenchSizes(o, 3);
  ASSERT_TRUE(sizes.ok());
  EXPECT_EQ(sizes.value(), (std::vector<int64_t>{996, 9996, 99996}));
  o.min_bytes = 1;
  o.max_bytes = 8;
  o.factor = 2;
  EXPECT_EQ(BenchSizes(o, 4).value(), (std::vector<int64_t>{16}));  // at least one float a rank
  o.max_bytes = 0;
  EXPECT_NE(BenchSizes(o, 2).status().message().find("min_bytes <= max_bytes"), std::string::npos);
  o.max_bytes = 64;
  o.factor = 1;
  EXPECT_NE(BenchSizes(o, 2).status().message().find("factor 1"), std::string::npos);
}

CommBenchOptions Small() {
  CommBenchOptions o;
  o.min_bytes = 1000;
  o.max_bytes = 100000;
  o.factor = 10;
  o.iters = 3;
  o.warmup = 1;
  return o;
}

// Runs the bench on `world` thread ranks over a dp group (collectives) and a
// second group of the same members (send/recv); rank r's rows in rows[r].
std::vector<std::vector<CommBenchRow>> BenchOnThreads(
    int64_t world, const CommBenchOptions &options,
    const std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator>, int64_t)>
        &wrap = nullptr) {
  std::vector<std::vector<CommBenchRow>> rows(static_cast<size_t>(world));
  std::vector<int64_t> members(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r) members[size_t(r)] = r;
  RunRanks(world, [&](int64_t rank, Store &store) {
    auto comm = ConnectGroup(&store, rank, "dp", members, Common());
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    auto p2p = ConnectGroup(&store, rank, "p2p", members, Common());
    ASSERT_TRUE(p2p.ok()) << p2p.status().message();
    std::unique_ptr<Communicator> c = std::move(comm).value();
    if (wrap) c = wrap(std::move(c), rank);
    Result<std::vector<CommBenchRow>> got = RunCommBench(*c, *p2p.value(), options);
    ASSERT_TRUE(got.ok()) << got.status().message();
    rows[size_t(rank)] = got.value();
  });
  return rows;
}

TEST(CommBench, EveryOperationOnThreeRanksIsRightWithNcclTestsBusFactors) {
  const std::vector<std::vector<CommBenchRow>> rows = BenchOnThreads(3, Small());
  ASSERT_EQ(rows[0].size(), 6u * 3u);
  for (size_t i = 0; i < rows[0].size(); ++i) {
    const CommBenchRow &r = rows[0][i];
    SCOPED_TRACE(std::string(BenchOpName(r.op)) + " " + std::to_string(r.bytes));
    EXPECT_EQ(r.errors, 0);
    EXPECT_EQ(r.bytes % 12, 0);
    EXPECT_EQ(r.iters, 3);
    ASSERT_GT(r.seconds, 0);
    EXPECT_NEAR(r.algbw, double(r.bytes) / r.seconds, 1e-6 * r.algbw);
    const double factor = r.op == BenchOp::kAllReduce                                      ? 4.0 / 3
                          : r.op == BenchOp::kAllGather || r.op == BenchOp::kReduceScatter ? 2.0 / 3
                                                                                           : 1.0;
    EXPECT_NEAR(r.busbw / r.algbw, factor, 1e-9);
    // The slowest rank's time: the same row on every rank.
    EXPECT_EQ(rows[1][i].seconds, r.seconds);
    EXPECT_EQ(rows[2][i].errors, 0);
  }
}

// An all-reduce that leaves one wrong element on rank 1 (a broken transport).
class CorruptingAllReduce final : public ForwardingCommunicator {
 public:
  CorruptingAllReduce(std::unique_ptr<Communicator> inner, bool corrupt)
      : ForwardingCommunicator(std::move(inner)), corrupt_(corrupt) {}
  std::unique_ptr<Work> AllReduceSum(float *data, int64_t count) override {
    Status st = inner().AllReduceSum(data, count)->Wait();
    if (corrupt_ && count > 5) data[5] += 1.0f;
    return std::make_unique<DoneWork>(st);
  }

 private:
  bool corrupt_;
};

TEST(CommBench, AWrongElementOnOneRankIsCountedOnEveryRank) {
  CommBenchOptions o = Small();
  o.ops = {BenchOp::kAllReduce, BenchOp::kBroadcast};
  const auto rows = BenchOnThreads(2, o, [](std::unique_ptr<Communicator> c, int64_t rank) {
    return std::unique_ptr<Communicator>(new CorruptingAllReduce(std::move(c), rank == 1));
  });
  for (const auto &rank_rows : rows) {
    ASSERT_EQ(rank_rows.size(), 6u);
    for (const CommBenchRow &r : rank_rows)
      EXPECT_EQ(r.errors, r.op == BenchOp::kAllReduce ? 1 : 0) << BenchOpName(r.op);
  }
}

TEST(CommBench, AOneRankGroupIsRefused) {
  std::unique_ptr<Communicator> solo = MakeSoloCommunicator("tp");
  Result<std::vector<CommBenchRow>> rows = RunCommBench(*solo, *solo, Small());
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("tp group has one rank"), std::string::npos);
}

}  // namespace
}  // namespace dst
