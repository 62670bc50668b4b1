// Pipeline schedules as data and their checker: every schedule for p = 1..8
// stages and m = 1..32 micro-batches passes the simulation (sends and
// receives pair up, nothing can wait forever), holds the activations the
// theory says (GPipe: m; 1F1B: min(p - r, m) on stage r), and has the bubble
// the theory says; broken programs are named errors, not hangs.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/pipeline/pipeline_schedule.h"

namespace dst {
namespace {

double Bubble(const PipeScheduleCheck &c, int64_t stage) {
  return double(c.idle[size_t(stage)]) / double(c.makespan);
}

TEST(PipeSchedule, EveryScheduleChecksForEveryShape) {
  for (PipeScheduleKind kind : {PipeScheduleKind::kGPipe, PipeScheduleKind::kOneForwardOneBackward,
                                PipeScheduleKind::kZeroBubbleH1})
    for (int64_t p = 1; p <= 8; ++p)
      for (int64_t m = 1; m <= 32; ++m) {
        const auto programs = BuildPipeSchedule(kind, p, m);
        Result<PipeScheduleCheck> check = CheckPipeSchedule(programs, m);
        ASSERT_TRUE(check.ok()) << PipeScheduleName(kind) << " p " << p << " m " << m << ": "
                                << check.status().message();
        for (int64_t r = 0; r < p; ++r) {
          const int64_t peak = check->peak_in_flight[size_t(r)];
          if (kind == PipeScheduleKind::kGPipe) {
            EXPECT_EQ(peak, m);
          } else if (kind == PipeScheduleKind::kOneForwardOneBackward) {
            EXPECT_EQ(peak, std::min(p - r, m)) << "p " << p << " m " << m << " stage " << r;
          } else {  // ZB-H1: one more, the deferred weight halves still read their inputs
            EXPECT_LE(peak, std::min(p - r + 1, m)) << "p " << p << " m " << m << " stage " << r;
          }
        }
      }
}

// With forward and backward one unit each, 1F1B and GPipe idle (p - 1) /
// (m + p - 1) of the step on every stage; ZB-H1 (three units: forward,
// input gradient, weight gradient; 1F1B's bubble fraction is the same with
// its backward two units) fills part of that bubble: its ideal is
// (p - 1) / (3m + p - 1), reached at p = 2; beyond, this greedy list
// schedule lies between the two (p = 4, m = 8: 0.17; ideal 0.11, 1F1B 0.27).
TEST(PipeSchedule, BubblesMatchTheTheory) {
  for (int64_t p : {2, 4, 8})
    for (int64_t m : {4, 8, 16}) {
      const double theory = double(p - 1) / double(m + p - 1);
      for (PipeScheduleKind kind :
           {PipeScheduleKind::kGPipe, PipeScheduleKind::kOneForwardOneBackward}) {
        Result<PipeScheduleCheck> c = CheckPipeSchedule(BuildPipeSchedule(kind, p, m), m);
        ASSERT_TRUE(c.ok());
        for (int64_t r = 0; r < p; ++r)
          EXPECT_NEAR(Bubble(c.value(), r), theory, 1e-12)
              << PipeScheduleName(kind) << " p " << p << " m " << m << " stage " << r;
      }
      Result<PipeScheduleCheck> zb =
          CheckPipeSchedule(BuildPipeSchedule(PipeScheduleKind::kZeroBubbleH1, p, m), m);
      ASSERT_TRUE(zb.ok());
      const double ideal = double(p - 1) / double(3 * m + p - 1);  // ZB-H1's own theory
      for (int64_t r = 0; r < p; ++r) {
        EXPECT_LT(Bubble(zb.value(), r), theory) << "p " << p << " m " << m << " stage " << r;
        if (p == 2) {
          EXPECT_NEAR(Bubble(zb.value(), r), ideal, 1e-12);
        }
        EXPECT_GE(Bubble(zb.value(), r), ideal - 1e-12);
      }
    }
}

// Interleaved 1F1B over v chunks per rank: every shape whose micro-batches
// divide into PyTorch's rounds checks, and the bubble is Megatron's (p - 1) /
// (v m + p - 1) exactly; a count that does not divide is a named error.
TEST(PipeSchedule, InterleavedChecksAndShrinksTheBubbleByV) {
  for (int64_t p = 1; p <= 8; ++p)
    for (int64_t m = 1; m <= 32; ++m)
      for (int64_t v = 1; v <= 4; ++v) {
        const int64_t rounds = std::max<int64_t>(1, m / p);
        const auto programs = BuildPipeSchedule(PipeScheduleKind::kInterleaved1F1B, p, m, v);
        Result<PipeScheduleCheck> c = CheckPipeSchedule(programs, m, v);
        if (v > 1 && m % rounds != 0) {  // with one chunk the rounds do not matter
          EXPECT_FALSE(c.ok()) << "p " << p << " m " << m << " v " << v;
          continue;
        }
        ASSERT_TRUE(c.ok()) << "p " << p << " m " << m << " v " << v << ": "
                            << c.status().message();
        if (m >= p && (p == 2 || p == 4 || p == 8)) {
          const double theory = double(p - 1) / double(v * m + p - 1);
          for (int64_t r = 0; r < p; ++r)
            EXPECT_NEAR(Bubble(c.value(), r), theory, 1e-12)
                << "p " << p << " m " << m << " v " << v << " rank " << r;
        }
      }
}

TEST(PipeSchedule, NamesParse) {
  EXPECT_EQ(ParsePipeSchedule("1f1b").value(), PipeScheduleKind::kOneForwardOneBackward);
  EXPECT_EQ(ParsePipeSchedule("gpipe").value(), PipeScheduleKind::kGPipe);
  EXPECT_EQ(ParsePipeSchedule("zb-h1").value(), PipeScheduleKind::kZeroBubbleH1);
  EXPECT_EQ(ParsePipeSchedule("interleaved").value(), PipeScheduleKind::kInterleaved1F1B);
  Result<PipeScheduleKind> bad = ParsePipeSchedule("zigzag");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"1f1b\" (default)"), std::string::npos);
}

std::string Error(const std::vector<std::vector<PipeAction>> &programs, int64_t m) {
  Result<PipeScheduleCheck> c = CheckPipeSchedule(programs, m);
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : c.status().message();
}

TEST(PipeSchedule, BrokenProgramsAreNamedErrors) {
  using P = PipeOp;
  // Stage 1 receives a gradient stage 2 never sends... with two stages:
  // both stages wait for each other (stage 0 waits for a gradient, stage 1
  // receives an activation that stage 0 sends only after that gradient).
  const std::vector<std::vector<PipeAction>> crossed = {
      {{P::kForward, 0}, {P::kRecvGradient, 0}, {P::kSendActivation, 0}, {P::kBackward, 0}},
      {{P::kRecvActivation, 0}, {P::kForward, 0}, {P::kBackward, 0}, {P::kSendGradient, 0}}};
  const std::string deadlock = Error(crossed, 1);
  EXPECT_NE(deadlock.find("cannot finish"), std::string::npos) << deadlock;
  EXPECT_NE(deadlock.find("stage 0 action 1 (recv_gradient of micro-batch 0) waits for stage 1"),
            std::string::npos)
      << deadlock;
  EXPECT_NE(deadlock.find("stage 1 action 0 (recv_activation of micro-batch 0) waits for stage 0"),
            std::string::npos)
      << deadlock;

  const std::string early = Error({{{P::kBackward, 0}, {P::kForward, 0}}}, 1);
  EXPECT_NE(early.find("a backward before its forward"), std::string::npos) << early;
  const std::string missing = Error({{{P::kForward, 0}, {P::kBackward, 0}}}, 2);
  EXPECT_NE(missing.find("never runs micro-batch 1's forward"), std::string::npos) << missing;
  const std::string first =
      Error({{{P::kRecvActivation, 0}, {P::kForward, 0}, {P::kBackward, 0}}}, 1);
  EXPECT_NE(first.find("the first stage receives no activations"), std::string::npos) << first;
  const std::string twice = Error({{{P::kForward, 0}, {P::kForward, 0}, {P::kBackward, 0}}}, 1);
  EXPECT_NE(twice.find("it already ran"), std::string::npos) << twice;
}

}  // namespace
}  // namespace dst
