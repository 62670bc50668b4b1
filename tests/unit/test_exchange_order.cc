// Exchanges over a stream-ordered transport (NCCL): every schedule the
// engine builds, for p = 2..8 stages, m = 1..16 micro-batches and v = 1..4
// chunks, runs without a hang when each run of consecutive sends and
// receives is one group, and its order-matched sends and receives carry the
// same message; a schedule that would hang, or whose messages cross, is a
// named error.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/pipeline/exchange_order.h"

namespace dst {
namespace {

using Op = PipeOp;

// The actions a regrouping must keep in order: the computations, the sends,
// and per peer the receives from it (what an order-matched transport pairs).
std::vector<PipeAction> Where(
    const std::vector<PipeAction> &actions, int64_t rank, int64_t p,
    int64_t what) {  // -2 compute, -1 sends, else receives from rank `what`
  std::vector<PipeAction> out;
  for (const PipeAction &a : actions) {
    const int64_t vs = a.chunk * p + rank;
    int64_t kind = -2;
    if (a.op == Op::kSendActivation || a.op == Op::kSendGradient) kind = -1;
    if (a.op == Op::kRecvActivation) kind = (vs - 1) % p;
    if (a.op == Op::kRecvGradient) kind = (vs + 1) % p;
    if (kind == what) out.push_back(a);
  }
  return out;
}

bool Same(const std::vector<PipeAction> &x, const std::vector<PipeAction> &y) {
  if (x.size() != y.size()) return false;
  for (size_t k = 0; k < x.size(); ++k)
    if (x[k].op != y[k].op || x[k].micro_batch != y[k].micro_batch || x[k].chunk != y[k].chunk)
      return false;
  return true;
}

TEST(ExchangeOrder, EveryScheduleRunsInStreamOrder) {
  for (PipeScheduleKind kind :
       {PipeScheduleKind::kGPipe, PipeScheduleKind::kOneForwardOneBackward,
        PipeScheduleKind::kZeroBubbleH1, PipeScheduleKind::kInterleaved1F1B})
    for (int64_t p = 2; p <= 8; ++p)
      for (int64_t m = 1; m <= 16; ++m)
        for (int64_t v = 1; v <= (kind == PipeScheduleKind::kInterleaved1F1B ? 4 : 1); ++v) {
          const auto built = BuildPipeSchedule(kind, p, m, v);
          if (!CheckPipeSchedule(built, m, v).ok()) continue;  // refused before it runs
          Result<std::vector<std::vector<PipeAction>>> grouped = GroupForStreamOrder(built, v);
          ASSERT_TRUE(grouped.ok()) << PipeScheduleName(kind) << " p " << p << " m " << m << " v "
                                    << v << ": " << grouped.status().message();
          const auto &paired = grouped.value();
          const std::string what = std::string(PipeScheduleName(kind)) + " p " + std::to_string(p) +
                                   " m " + std::to_string(m) + " v " + std::to_string(v);
          Result<PipeScheduleCheck> still = CheckPipeSchedule(paired, m, v);
          ASSERT_TRUE(still.ok()) << what << ": " << still.status().message();
          Status st = CheckExchanges(paired, v);
          EXPECT_TRUE(st.ok()) << what << ": " << st.message();
          std::vector<std::vector<PipeAction>> forward;
          for (const auto &actions : paired) forward.push_back(ForwardActions(actions));
          st = CheckExchanges(forward, v);
          EXPECT_TRUE(st.ok()) << what << " (evaluation): " << st.message();
          for (int64_t r = 0; r < p; ++r) {  // only receives moved, each peer's in order
            for (int64_t kind = -2; kind < p; ++kind)
              EXPECT_TRUE(
                  Same(Where(built[size_t(r)], r, p, kind), Where(paired[size_t(r)], r, p, kind)))
                  << what << " rank " << r << " kind " << kind;
            EXPECT_EQ(still.value().peak_in_flight[size_t(r)],
                      CheckPipeSchedule(built, m, v).value().peak_in_flight[size_t(r)])
                << what << " rank " << r;
          }
        }
}

TEST(ExchangeOrder, EndsMarkTheLastOfEachRun) {
  const std::vector<PipeAction> actions = {{Op::kForward, 0},      {Op::kSendActivation, 0},
                                           {Op::kForward, 1},      {Op::kSendActivation, 1},
                                           {Op::kRecvGradient, 0}, {Op::kBackward, 0}};
  EXPECT_EQ(ExchangeEnds(actions), (std::vector<bool>{false, true, false, false, true, false}));
}

// Zero-bubble as built: stage 1 sends micro-batch 1's gradient and then
// computes a weight gradient before its next receive, while stage 0's lone
// send of micro-batch 2 waits for that receive — and stage 0's receive of
// the gradient sits behind it. Over Gloo (tags, receives posted ahead) it
// runs; over NCCL it would hang until regrouped.
TEST(ExchangeOrder, AHangIsNamedAndRegroupingRemovesIt) {
  const auto built = BuildPipeSchedule(PipeScheduleKind::kZeroBubbleH1, 2, 3);
  ASSERT_TRUE(CheckPipeSchedule(built, 3).ok());
  Status st = CheckExchanges(built);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("would hang"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("stage 0 action 5 (send_activation of micro-batch 2) waits for "
                              "stage 1's receive"),
            std::string::npos)
      << st.message();
  Result<std::vector<std::vector<PipeAction>>> grouped = GroupForStreamOrder(built);
  ASSERT_TRUE(grouped.ok()) << grouped.status().message();
  EXPECT_TRUE(CheckExchanges(grouped.value()).ok());
  EXPECT_TRUE(Same(grouped.value()[0], built[0]));  // stage 0 needed no move
  // Stage 1's receive of micro-batch 2 moved over micro-batch 0's weight gradient
  // into the exchange of micro-batch 1's gradient.
  const std::vector<PipeAction> &stage1 = grouped.value()[1];
  const auto w = std::find_if(stage1.begin(), stage1.end(), [](const PipeAction &a) {
    return a.op == Op::kBackwardWeight && a.micro_batch == 0;
  });
  ASSERT_NE(w, stage1.begin());
  EXPECT_EQ((w - 1)->op, Op::kRecvActivation);
  EXPECT_EQ((w - 1)->micro_batch, 2);
  EXPECT_EQ((w - 2)->op, Op::kSendGradient);
  EXPECT_EQ((w - 2)->micro_batch, 1);
}

// Stage 1 takes micro-batch 1's activations before micro-batch 0's. With
// tags each lands in its own buffer; an order-matched transport delivers the
// first send (micro-batch 0) into the first receive, so it is named.
TEST(ExchangeOrder, CrossedMessagesAreNamed) {
  std::vector<std::vector<PipeAction>> programs = {{{Op::kForward, 0},
                                                    {Op::kSendActivation, 0},
                                                    {Op::kForward, 1},
                                                    {Op::kSendActivation, 1},
                                                    {Op::kRecvGradient, 0},
                                                    {Op::kBackward, 0},
                                                    {Op::kRecvGradient, 1},
                                                    {Op::kBackward, 1}},
                                                   {{Op::kRecvActivation, 0},
                                                    {Op::kRecvActivation, 1},
                                                    {Op::kForward, 0},
                                                    {Op::kBackward, 0},
                                                    {Op::kSendGradient, 0},
                                                    {Op::kForward, 1},
                                                    {Op::kBackward, 1},
                                                    {Op::kSendGradient, 1}}};
  ASSERT_TRUE(CheckPipeSchedule(programs, 2).ok());
  ASSERT_TRUE(CheckExchanges(programs).ok());
  std::swap(programs[1][0], programs[1][1]);
  ASSERT_TRUE(CheckPipeSchedule(programs, 2).ok());  // tags would sort it out
  Status st = CheckExchanges(programs);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("do not match in order"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("carries the activations of micro-batch 1 for virtual stage 1, "
                              "while its partner carries the activations of micro-batch 0"),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace dst
