// WorkOrder: how the kernels after a collective wait for it — at once on the
// host for a Work without a completion event, through the compute stream's
// wait for one with an event (the Work kept until Drain reports it).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/comm/work_order.h"

namespace dst {
namespace {

// A Work whose completion the test decides; counts the waits.
struct FakeState {
  bool done = false;
  int waits = 0;
  bool destroyed = false;
  Status status;
};

class FakeWork final : public Work {
 public:
  FakeWork(FakeState *state, bool has_event) : s_(state), has_event_(has_event) {}
  ~FakeWork() override { s_->destroyed = true; }
  Status Wait() override {
    ++s_->waits;
    s_->done = true;
    return s_->status;
  }
  bool Test() override { return s_->done; }
  void *CompletionEvent() const override { return has_event_ ? s_ : nullptr; }

 private:
  FakeState *s_;
  bool has_event_;
};

struct Recorder {
  std::vector<void *> events;
  Status answer;
  WorkOrder::WaitOnEvent fn() {
    return [this](void *event) {
      events.push_back(event);
      return answer;
    };
  }
};

TEST(WorkOrder, AWorkWithoutAnEventIsWaitedForAtOnce) {
  Recorder stream;
  WorkOrder order(stream.fn());
  FakeState s;
  s.status = Status(Code::kComm, "peer 3 died");
  const Status st = order.After(std::make_unique<FakeWork>(&s, false), "tensor-parallel x");
  EXPECT_EQ(s.waits, 1);
  EXPECT_TRUE(s.destroyed);
  EXPECT_TRUE(stream.events.empty());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tensor-parallel x"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("peer 3 died"), std::string::npos) << st.message();
  EXPECT_TRUE(order.After(nullptr, "nothing").ok());
}

TEST(WorkOrder, TheStreamWaitsOnTheEventAndTheHostGoesOnUntilDrain) {
  Recorder stream;
  WorkOrder order(stream.fn());
  FakeState a, b;
  ASSERT_TRUE(order.After(std::make_unique<FakeWork>(&a, true), "first").ok());
  ASSERT_TRUE(order.After(std::make_unique<FakeWork>(&b, true), "second").ok());
  EXPECT_EQ(stream.events, (std::vector<void *>{&a, &b}));
  EXPECT_EQ(a.waits + b.waits, 0);  // the host did not wait
  EXPECT_EQ(order.kept(), 2u);
  EXPECT_TRUE(order.Drain().ok());
  EXPECT_EQ(a.waits, 1);
  EXPECT_EQ(b.waits, 1);
  EXPECT_TRUE(a.destroyed && b.destroyed);
  EXPECT_EQ(order.kept(), 0u);
}

// A kept Work that failed is reported once, in its own words: by the next
// hand-over when it finished meanwhile, else by Drain; finished Works are
// dropped as later ones arrive.
TEST(WorkOrder, DrainReportsTheFirstFailureOnceAndFinishedWorksArePruned) {
  Recorder stream;
  WorkOrder order(stream.fn());
  FakeState a, b, c;
  a.status = Status(Code::kComm, "allreduce timed out after 300 s");
  ASSERT_TRUE(order.After(std::make_unique<FakeWork>(&a, true), "row-parallel linear").ok());
  ASSERT_TRUE(order.After(std::make_unique<FakeWork>(&b, true), "embedding").ok());
  a.done = true;  // finished (failed) while the host went on
  // The next hand-over reports it (the caller stops there), keeping the new Work.
  const Status st = order.After(std::make_unique<FakeWork>(&c, true), "LM head");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("row-parallel linear"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("timed out after 300 s"), std::string::npos) << st.message();
  EXPECT_TRUE(a.destroyed);  // pruned
  EXPECT_EQ(order.kept(), 2u);
  EXPECT_TRUE(order.Drain().ok());  // reported once
  EXPECT_EQ(b.waits + c.waits, 2);

  // A failure found only by Drain is reported there.
  FakeState d;
  d.status = Status(Code::kComm, "peer 2 died");
  ASSERT_TRUE(order.After(std::make_unique<FakeWork>(&d, true), "embedding").ok());
  const Status drained = order.Drain();
  ASSERT_FALSE(drained.ok());
  EXPECT_NE(drained.message().find("embedding"), std::string::npos) << drained.message();
}

// A wait the stream cannot queue is an error at once; the Work is waited for
// (its buffers are not left to a running collective).
TEST(WorkOrder, AStreamWaitThatCannotBeQueuedIsNamed) {
  Recorder stream;
  stream.answer = Status(Code::kInternal, "cudaStreamWaitEvent: invalid resource handle");
  WorkOrder order(stream.fn());
  FakeState s;
  const Status st = order.After(std::make_unique<FakeWork>(&s, true), "tensor-parallel y");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tensor-parallel y: the compute stream's wait for it"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(s.waits, 1);
  EXPECT_EQ(order.kept(), 0u);
}

// The order's end waits for what it still keeps.
TEST(WorkOrder, ItsEndWaitsForTheKeptWorks) {
  Recorder stream;
  FakeState s;
  {
    WorkOrder order(stream.fn());
    ASSERT_TRUE(order.After(std::make_unique<FakeWork>(&s, true), "z").ok());
  }
  EXPECT_EQ(s.waits, 1);
  EXPECT_TRUE(s.destroyed);
}

}  // namespace
}  // namespace dst
