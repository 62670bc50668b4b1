// StageLink when a peer dies: a send posted earlier fails, and the next
// output buffer it would free is reported with that failure (naming the
// lost rank), not as an internal "send before its forward" later (a CI run
// saw that message instead of the dead rank when the pool had to reap).
#include "core/pipeline/stage_link.h"

#include <gtest/gtest.h>

#include <vector>

namespace dst {
namespace {

// Rank 0 of two stages whose sends to rank 1 all fail as a dead peer's do.
class DeadPeer final : public ForwardingCommunicator {
 public:
  DeadPeer() : ForwardingCommunicator(MakeSoloCommunicator("pp")) {}
  int64_t size() const override { return 2; }
  std::unique_ptr<Work> Send(const void *, int64_t, int64_t peer, uint32_t) override {
    return std::make_unique<DoneWork>(Status(
        Code::kComm, "send to rank " + std::to_string(peer) + " failed: rank 1 died first"));
  }
  std::unique_ptr<Work> Recv(void *, int64_t, int64_t, uint32_t) override {
    return std::make_unique<DoneWork>();
  }
};

TEST(StageLink, AFailedSendIsReportedWhenItsBufferIsNeeded) {
  DeadPeer p2p, pp;
  MemoryTracker tracker;
  StageLink link(&p2p, &pp, {ChunkShape{4, 4}}, 2, &tracker);
  ASSERT_TRUE(link.BeginStep(2, 2, /*training=*/true).ok());
  const std::vector<float> output(8, 1.0f);
  ASSERT_TRUE(link.KeepOutput(0, 0, output.data(), 2).ok());
  ASSERT_TRUE(link.SendActivation(0, 0).ok());  // posted; it fails in flight
  const Status kept = link.KeepOutput(0, 1, output.data(), 2);
  ASSERT_FALSE(kept.ok());
  EXPECT_NE(kept.message().find("rank 1 died first"), std::string::npos) << kept.message();
  EXPECT_EQ(kept.code(), Code::kComm) << kept.message();
}

}  // namespace
}  // namespace dst
