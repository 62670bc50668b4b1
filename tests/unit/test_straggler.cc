// Straggler verdicts: ranks slower than the median by more than the
// tolerance, slowest first; the median of an even count; nobody at equal
// times; and the detector over a real store on threads (every rank gets the
// same verdict at the end of each window, none in between).
#include "core/engine/straggler.h"

#include <gtest/gtest.h>

#include <mutex>

#include "tests/unit/ranks_on_threads.h"

namespace dst {
namespace {

TEST(Straggler, RanksBeyondTheToleranceOverTheMedianSlowestFirst) {
  const std::vector<StragglerReport> ranks = {
      {0, "a", 1.0, 0}, {1, "b", 1.3, 0}, {2, "c", 1.05, 0}, {3, "d", 2.0, 0}, {4, "e", 0.9, 0}};
  const StragglerVerdict v = JudgeStragglers(ranks, 0.1, 1);
  EXPECT_EQ(v.median_seconds, 1.05);
  ASSERT_EQ(v.slow.size(), 2u);
  EXPECT_EQ(v.slow[0].rank, 3);
  EXPECT_EQ(v.slow[0].host, "d");
  EXPECT_NEAR(v.slow[0].slower_by, 2.0 / 1.05 - 1, 1e-12);
  EXPECT_EQ(v.slow[1].rank, 1);
  EXPECT_TRUE(v.this_rank_slow);
  EXPECT_FALSE(JudgeStragglers(ranks, 0.1, 2).this_rank_slow);
  // Even count: the mean of the middle two; equal times: nobody.
  EXPECT_EQ(JudgeStragglers({{0, "", 1, 0}, {1, "", 3, 0}}, 0.1, 0).median_seconds, 2.0);
  EXPECT_TRUE(JudgeStragglers({{0, "", 1, 0}, {1, "", 1, 0}}, 0.0, 0).slow.empty());
}

TEST(Straggler, EveryRankGetsTheSameVerdictAtTheEndOfEachWindow) {
  std::mutex mu;
  std::vector<std::vector<int64_t>> slow_seen(3);
  test::RunRanks(3, [&](int64_t rank, Store &store) {
    StragglerDetector detector(&store, rank, 3, 0.2, 2, std::chrono::seconds(5));
    for (int step = 1; step <= 4; ++step) {
      Result<StragglerVerdict> v = detector.OnStep(rank == 2 ? 0.015 : 0.010);
      ASSERT_TRUE(v.ok()) << v.status().message();
      EXPECT_EQ(v->checked, step % 2 == 0);
      if (!v->checked) continue;
      EXPECT_EQ(v->this_rank_slow, rank == 2);
      std::lock_guard<std::mutex> lock(mu);
      for (const StragglerReport &r : v->slow) slow_seen[size_t(rank)].push_back(r.rank);
    }
  });
  for (const auto &seen : slow_seen) EXPECT_EQ(seen, (std::vector<int64_t>{2, 2}));
}

}  // namespace
}  // namespace dst
