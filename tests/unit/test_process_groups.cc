// Process groups from the rank grid, and point-to-point on the Gloo backend:
// group membership on every rank of a 2 x 2 x 2 (pp x dp x tp) grid, built
// for real as 8 threads over a TCP store on loopback; send/recv of fp32 and
// 16-bit payloads with several tags in flight, both sides sending first, a
// large message, Test() before and after completion; and a peer that dies
// during a receive, named by the survivor within the timeout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/gloo_communicator.h"
#include "core/comm/process_groups.h"
#include "core/comm/tcp_store.h"
#include "core/topology/topology.h"
#include "tests/unit/ranks_on_threads.h"

namespace dst {
namespace {

using Clock = std::chrono::steady_clock;
using test::Common;
using test::kTimeout;
using test::RunRanks;

TEST(ProcessGroups, GridMembershipOnEveryRankOfA2x2x2Grid) {
  const Topology t(2, 2, 2);  // pp, dp, tp
  for (int64_t r = 0; r < 8; ++r) {
    const GridCoord c = t.CoordOf(r);
    EXPECT_EQ(c.tp, r % 2);
    EXPECT_EQ(c.dp, (r / 2) % 2);
    EXPECT_EQ(c.pp, r / 4);
    const int64_t tp0 = r - r % 2, dp0 = r - ((r / 2) % 2) * 2, pp0 = r % 4;
    EXPECT_EQ(t.TensorParallelGroup(r), (std::vector<int64_t>{tp0, tp0 + 1})) << r;
    EXPECT_EQ(t.DataParallelGroup(r), (std::vector<int64_t>{dp0, dp0 + 2})) << r;
    EXPECT_EQ(t.PipelineGroup(r), (std::vector<int64_t>{pp0, pp0 + 4})) << r;
  }
  EXPECT_EQ(GroupKey("dp", {1, 3}), "dp[1,3]");
}

// Every rank builds its groups; an all-reduce of the global rank over each
// group equals the sum of the members the grid says it has, and activations
// travel along the pipeline group by send/recv.
TEST(ProcessGroups, EightRanksBuildTheirGroupsAndTalkInThem) {
  const Topology topology(2, 2, 2);
  std::atomic<int> checked{0};
  RunRanks(8, [&](int64_t rank, Store &store) {
    Result<ProcessGroups> built = BuildProcessGroups(&store, rank, topology, Common());
    ASSERT_TRUE(built.ok()) << built.status().message();
    ProcessGroups &g = built.value();
    const GridCoord c = topology.CoordOf(rank);
    EXPECT_EQ(g.dp->size(), 2);
    EXPECT_EQ(g.tp->size(), 2);
    EXPECT_EQ(g.pp->size(), 2);
    EXPECT_EQ(g.dp->rank(), c.dp);
    EXPECT_EQ(g.tp->rank(), c.tp);
    EXPECT_EQ(g.pp->rank(), c.pp);
    struct Case {
      Communicator *comm;
      const std::vector<int64_t> *members;
    };
    for (const Case &k : {Case{g.dp.get(), &g.dp_members}, Case{g.tp.get(), &g.tp_members},
                          Case{g.pp.get(), &g.pp_members}}) {
      float value = float(rank);
      ASSERT_TRUE(k.comm->AllReduceSum(&value, 1)->Wait().ok());
      EXPECT_EQ(value, float(std::accumulate(k.members->begin(), k.members->end(), int64_t(0))))
          << "rank " << rank << " group " << k.comm->name();
    }
    // Stage 0 sends its "activation" to stage 1, which sends back a "gradient".
    std::vector<float> act(64), grad(64);
    if (c.pp == 0) {
      for (size_t i = 0; i < act.size(); ++i) act[i] = float(rank * 1000 + int64_t(i));
      ASSERT_TRUE(g.pp->Send(act.data(), 64 * 4, 1, 7)->Wait().ok());
      ASSERT_TRUE(g.pp->Recv(grad.data(), 64 * 4, 1, 8)->Wait().ok());
      for (size_t i = 0; i < grad.size(); ++i) EXPECT_EQ(grad[i], -act[i]);
    } else {
      ASSERT_TRUE(g.pp->Recv(act.data(), 64 * 4, 0, 7)->Wait().ok());
      EXPECT_EQ(act[3], float(g.pp_members[0] * 1000 + 3));
      for (size_t i = 0; i < act.size(); ++i) grad[i] = -act[i];
      ASSERT_TRUE(g.pp->Send(grad.data(), 64 * 4, 0, 8)->Wait().ok());
    }
    ASSERT_TRUE(g.dp->Barrier().ok());
    ++checked;
  });
  EXPECT_EQ(checked.load(), 8);
}

// Reduce-scatter and all-gather keep the communicator's contract on groups
// of 2, 3 and 4 (Gloo's halving-doubling leaves a rank's shard at the start
// of its buffer; the communicator moves it to rank * shard).
TEST(ProcessGroups, ReduceScatterAndAllGatherPlaceEachRanksShard) {
  for (const int64_t world : {2, 3, 4}) {
    RunRanks(world, [&](int64_t rank, Store &store) {
      Result<ProcessGroups> built =
          BuildProcessGroups(&store, rank, Topology(1, world, 1), Common());
      ASSERT_TRUE(built.ok()) << built.status().message();
      Communicator &dp = *built.value().dp;
      const int64_t shard = 5;
      std::vector<float> data(size_t(world * shard));
      for (size_t i = 0; i < data.size(); ++i) data[i] = float(rank * 100 + int64_t(i));
      ASSERT_TRUE(dp.ReduceScatterSum(data.data(), shard)->Wait().ok());
      for (int64_t i = rank * shard; i < (rank + 1) * shard; ++i)  // sum over r of r*100 + i
        EXPECT_EQ(data[size_t(i)], float(100 * world * (world - 1) / 2 + world * i))
            << "world " << world << " rank " << rank << " element " << i;
      std::vector<float> all(size_t(world * shard), -1.0f);
      for (int64_t i = 0; i < shard; ++i) all[size_t(rank * shard + i)] = float(rank * 10 + i);
      ASSERT_TRUE(dp.AllGather(all.data(), shard)->Wait().ok());
      for (int64_t r = 0; r < world; ++r)
        for (int64_t i = 0; i < shard; ++i)
          EXPECT_EQ(all[size_t(r * shard + i)], float(r * 10 + i)) << "world " << world;
    });
  }
}

TEST(ProcessGroups, AGridThatIsNotTheWorldIsRefused) {
  Result<ProcessGroups> g = BuildProcessGroups(nullptr, 5, Topology(1, 2, 2), Common());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("outside the 1 x 2 x 2"), std::string::npos);
}

// Two ranks connected as one Gloo group.
std::unique_ptr<Communicator> Connect(Store &store, int64_t rank,
                                      std::chrono::milliseconds timeout = kTimeout,
                                      std::shared_ptr<const AbortSignal> abort = nullptr) {
  GlooOptions o = Common(timeout);
  o.abort = std::move(abort);
  o.name = "pp";
  o.rank = rank;
  o.size = 2;
  auto comm = CreateGlooCommunicator(store, o);
  EXPECT_TRUE(comm.ok()) << comm.status().message();
  return comm.ok() ? std::move(comm.value()) : nullptr;
}

TEST(PointToPoint, PayloadsTagsLargeMessagesAndTest) {
  RunRanks(2, [&](int64_t rank, Store &store) {
    std::unique_ptr<Communicator> comm = Connect(store, rank);
    ASSERT_TRUE(comm);
    const int64_t peer = 1 - rank;
    // Several tags in flight, received in the opposite order they were sent,
    // and both sides send before they receive.
    std::vector<float> out32(100), in32(100);
    std::vector<uint16_t> out16(50), in16(50);
    for (size_t i = 0; i < out32.size(); ++i) out32[i] = float(rank * 100 + int64_t(i)) + 0.5f;
    for (size_t i = 0; i < out16.size(); ++i) out16[i] = uint16_t(rank * 1000 + int64_t(i));
    auto s1 = comm->Send(out32.data(), 400, peer, 1);
    auto s2 = comm->Send(out16.data(), 100, peer, 2);
    auto r2 = comm->Recv(in16.data(), 100, peer, 2);
    auto r1 = comm->Recv(in32.data(), 400, peer, 1);
    ASSERT_TRUE(r2->Wait().ok());
    ASSERT_TRUE(r1->Wait().ok());
    ASSERT_TRUE(s1->Wait().ok());
    ASSERT_TRUE(s2->Wait().ok());
    EXPECT_TRUE(r1->Test());
    for (size_t i = 0; i < in32.size(); ++i)
      EXPECT_EQ(in32[i], float(peer * 100 + int64_t(i)) + 0.5f);
    for (size_t i = 0; i < in16.size(); ++i) EXPECT_EQ(in16[i], uint16_t(peer * 1000 + int64_t(i)));

    // 8 MB; Test() is false while the peer has not sent, true after.
    const size_t n = size_t(2) << 20;
    std::vector<float> big(n), got(n);
    for (size_t i = 0; i < n; ++i) big[i] = float(i % 9973) * (rank ? -1.0f : 1.0f);
    if (rank == 0) {
      auto recv = comm->Recv(got.data(), int64_t(n * 4), 1, 3);
      EXPECT_FALSE(recv->Test());  // rank 1 sends only after the store says go
      ASSERT_TRUE(store.Set("go", {1}).ok());
      const auto deadline = Clock::now() + kTimeout;
      while (!recv->Test() && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      EXPECT_TRUE(recv->Test());
      ASSERT_TRUE(recv->Wait().ok());
      EXPECT_EQ(got[12345], -float(12345 % 9973));
      EXPECT_EQ(got[n - 1], -float((n - 1) % 9973));
    } else {
      ASSERT_TRUE(store.Get("go", kTimeout).ok());
      ASSERT_TRUE(comm->Send(big.data(), int64_t(n * 4), 0, 3)->Wait().ok());
    }
    // A group of one has no peer.
    auto solo = MakeSoloCommunicator("pp");
    EXPECT_FALSE(solo->Send(big.data(), 4, 1, 0)->Wait().ok());
    ASSERT_TRUE(comm->Barrier().ok());
  });
}

// Rank 1 dies (its store connection drops without finishing, its sockets
// close) while rank 0 waits to receive from it: rank 0's receive fails
// within the timeout, naming the lost rank and the operation.
TEST(PointToPoint, ADeadPeerDuringRecvIsNamed) {
  const std::chrono::milliseconds timeout(3000);
  std::string message;
  double seconds = 0;
  RunRanks(2, [&](int64_t rank, Store &store) {
    std::unique_ptr<Communicator> comm = Connect(store, rank, timeout);
    ASSERT_TRUE(comm);
    std::vector<float> buf(16);
    if (rank == 1) {
      ASSERT_TRUE(store.Get("receiving", kTimeout).ok());
      store.Abort();  // as a killed process: no "finished" mark
      comm.reset();   // its sockets close
      return;
    }
    const auto start = Clock::now();
    auto recv = comm->Recv(buf.data(), 64, 1, 9);
    ASSERT_TRUE(store.Set("receiving", {1}).ok());
    Status st = recv->Wait();
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
    ASSERT_FALSE(st.ok());
    message = st.message();
  });
  EXPECT_LT(seconds, 3.0 + 3.5) << message;  // the timeout plus the lost-rank lookup
  EXPECT_NE(message.find("recv of 64 bytes from rank 1 (tag 9)"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
}

// Rank 1 stops taking part (it never calls the all-reduce or the send);
// rank 0's all-reduce and receive each end within a second of its abort
// signal (kAborted, naming the operation), and destroying the group then
// does not wait for the group's timeout (the connections are closed).
TEST(Abort, AnAllReduceAndARecvOnAPeerThatStoppedEndWithinASecond) {
  const std::chrono::milliseconds timeout(60000);
  for (bool p2p : {false, true}) {
    auto signal = std::make_shared<AbortSignal>();
    double waited = 0, closed = 0;
    Status status;
    RunRanks(2, [&](int64_t rank, Store &store) {
      std::unique_ptr<Communicator> comm = Connect(store, rank, timeout, signal);
      ASSERT_TRUE(comm);
      std::vector<float> buf(1024, 1.0f);
      if (rank == 1) {  // alive and connected, but never calls
        ASSERT_TRUE(store.Get("done", kTimeout).ok());
        return;
      }
      std::thread raiser([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        signal->Raise();
      });
      const auto start = Clock::now();
      status = p2p ? comm->Recv(buf.data(), 4096, 1, 7)->Wait()
                   : comm->AllReduceSum(buf.data(), 1024)->Wait();
      waited = std::chrono::duration<double>(Clock::now() - start).count();
      raiser.join();
      const auto closing = Clock::now();
      comm.reset();
      closed = std::chrono::duration<double>(Clock::now() - closing).count();
      ASSERT_TRUE(store.Set("done", {1}).ok());
    });
    EXPECT_EQ(status.code(), Code::kAborted) << status.message();
    EXPECT_NE(status.message().find(p2p ? "recv of 4096 bytes" : "allreduce of 4096 bytes"),
              std::string::npos)
        << status.message();
    EXPECT_LT(waited, 0.3 + 1.0) << status.message();
    EXPECT_LT(closed, 2.0);
  }
}

}  // namespace
}  // namespace dst

namespace dst {
namespace {

// Stream semantics belong to device backends: a Gloo group's work completes
// on the host (no completion event), and asking it to order after a device
// stream is refused by name; null (no ordering) is accepted.
TEST(StreamSemantics, AHostGroupHasNoEventsAndRefusesAStream) {
  test::RunRanks(2, [&](int64_t rank, Store &store) {
    std::unique_ptr<Communicator> comm = Connect(store, rank);
    ASSERT_TRUE(comm);
    std::vector<float> buf(8, 1.0f);
    std::unique_ptr<Work> work = comm->AllReduceSum(buf.data(), 8);
    EXPECT_EQ(work->CompletionEvent(), nullptr);
    EXPECT_TRUE(work->Wait().ok());
    EXPECT_TRUE(comm->OrderAfter(nullptr).ok());
    int not_a_stream = 0;
    const Status st = comm->OrderAfter(&not_a_stream);
    EXPECT_EQ(st.code(), Code::kNotSupported);
    EXPECT_NE(st.message().find("completes its operations on the host"), std::string::npos)
        << st.message();
  });
}

}  // namespace
}  // namespace dst
