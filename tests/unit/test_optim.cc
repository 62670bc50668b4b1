// Optimizers and LR schedules against hand-computed torch / DeepSpeed values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/optim/clip.h"
#include "core/optim/lr_schedule.h"
#include "core/optim/optimizer.h"

namespace dst {
namespace {

TEST(Optimizer, AdamWMatchesTorchFormulaOverThreeSteps) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdamW;
  c.lr = 0.01;
  c.betas = {0.9, 0.95};
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  MemoryTracker tracker;
  Optimizer opt(c, 2, &tracker);
  std::vector<float> p = {1.0f, -2.0f};
  const std::vector<float> g = {0.5f, 0.25f};
  // Reference in double: torch.optim.AdamW.
  double rp[2] = {1.0, -2.0}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int step = 1; step <= 3; ++step) {
    opt.Step(p.data(), g.data(), c.lr);
    for (int i = 0; i < 2; ++i) {
      rp[i] *= 1 - c.lr * c.weight_decay;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
      const double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.95, step);
      rp[i] -= c.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + c.eps);
    }
  }
  EXPECT_NEAR(p[0], rp[0], 1e-6);
  EXPECT_NEAR(p[1], rp[1], 1e-6);
  EXPECT_EQ(opt.steps_taken(), 3);
  EXPECT_EQ(tracker.Current(MemoryCategory::kOptimizerState), 2 * 2 * 4);
}

// FusedLamb on one tensor, in double: the moments, u = m / (sqrt(v) + eps) +
// wd p, p -= lr sqrt(1 - b2^t) / (1 - b1^t) clamp(|p| / |u|) u.
TEST(Optimizer, LambMatchesFusedLambOverThreeSteps) {
  OptimizerConfig c;
  c.type = OptimizerType::kLamb;
  c.lr = 0.01;
  c.betas = {0.9, 0.95};
  c.eps = 1e-6;
  c.weight_decay = 0.1;
  c.max_coeff = 10.0;
  c.min_coeff = 0.01;
  MemoryTracker tracker;
  const int n = 37;  // vector paths and a scalar tail
  Optimizer opt(c, n, &tracker);
  std::vector<float> p(n), g(n);
  std::vector<double> rp(n), m(n, 0), v(n, 0), u(n);
  for (int i = 0; i < n; ++i) {
    p[size_t(i)] = float(std::sin(i + 1.0)), rp[size_t(i)] = p[size_t(i)];
    g[size_t(i)] = float(0.3 * std::cos(3.0 * i));
  }
  for (int step = 1; step <= 3; ++step) {
    opt.Step(p.data(), g.data(), c.lr);
    double w2 = 0, u2 = 0;
    for (size_t i = 0; i < size_t(n); ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
      u[i] = m[i] / (std::sqrt(v[i]) + c.eps) + c.weight_decay * rp[i];
      w2 += rp[i] * rp[i], u2 += u[i] * u[i];
    }
    const double trust = std::clamp(std::sqrt(w2) / std::sqrt(u2), c.min_coeff, c.max_coeff);
    const double size = c.lr * std::sqrt(1 - std::pow(0.95, step)) / (1 - std::pow(0.9, step));
    for (size_t i = 0; i < size_t(n); ++i) rp[i] -= size * trust * u[i];
    EXPECT_NEAR(opt.trust_ratio(0), trust, 1e-5 * trust);
  }
  for (size_t i = 0; i < size_t(n); ++i) EXPECT_NEAR(p[i], rp[i], 1e-6) << i;
}

// Two tensors in one range: each moves by its own ratio, and the parts of
// one tensor in different pieces add up to the whole tensor's sums.
TEST(Optimizer, LambTakesEachTensorsOwnTrustRatio) {
  OptimizerConfig c;
  c.type = OptimizerType::kLamb;
  MemoryTracker tracker;
  Optimizer whole(c, 40, &tracker), split(c, 40, &tracker);
  split.SetTensorParts({{1, 10, 30}, {0, 0, 10}}, 2);
  std::vector<float> pa(40), pb(40), g(40);
  for (int i = 0; i < 40; ++i) {
    pa[size_t(i)] = pb[size_t(i)] = i < 10 ? 5.0f + float(i) : 0.01f * float(i);
    g[size_t(i)] = float(std::cos(i));
  }
  whole.Step(pa.data(), g.data(), c.lr);
  // The split optimizer in pieces of 7: the tensors' parts cross them.
  split.BeginStep();
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) split.BeginApplyPass();
    for (int64_t at = 0; at < 40; at += 7) {
      StatePiece piece;
      ASSERT_TRUE(split.AcquireState(at, std::min<int64_t>(7, 40 - at), &piece).ok());
      split.Update(piece, pb.data() + at, g.data() + at, c.lr);
      ASSERT_TRUE(split.ReleaseState(piece).ok());
    }
  }
  EXPECT_NE(split.trust_ratio(0), split.trust_ratio(1));
  // Large weights against unit-sized updates: the first tensor's ratio is larger.
  EXPECT_GT(split.trust_ratio(0), split.trust_ratio(1));
  EXPECT_NE(pa, pb);  // one ratio for everything moves them otherwise
  double w2 = 0;
  for (int i = 0; i < 10; ++i) w2 += double(5.0f + float(i)) * double(5.0f + float(i));
  EXPECT_NEAR(split.trust_sums()[0], w2, 1e-9 * w2);
}

TEST(Optimizer, AdamWithoutAdamWModeUsesL2Decay) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  c.adam_w_mode = false;
  c.lr = 0.1;
  c.weight_decay = 0.5;
  MemoryTracker tracker;
  Optimizer opt(c, 1, &tracker);
  float p = 2.0f;
  const float g = 0.0f;
  opt.Step(&p, &g, c.lr);
  // grad' = 0 + 0.5*2 = 1; first Adam step moves by lr * sign = 0.1 (eps negligible).
  EXPECT_NEAR(p, 1.9f, 1e-6);
}

TEST(Optimizer, SgdMomentumAndNesterovFollowTorch) {
  OptimizerConfig c;
  c.type = OptimizerType::kSGD;
  c.lr = 0.1;
  c.momentum = 0.9;
  c.nesterov = true;
  MemoryTracker tracker;
  Optimizer opt(c, 1, &tracker);
  float p = 1.0f;
  const float g = 1.0f;
  opt.Step(&p, &g, c.lr);  // buf = 1; d = 1 + 0.9*1 = 1.9
  EXPECT_NEAR(p, 1.0f - 0.19f, 1e-6);
  opt.Step(&p, &g, c.lr);  // buf = 0.9 + 1 = 1.9; d = 1 + 0.9*1.9 = 2.71
  EXPECT_NEAR(p, 1.0f - 0.19f - 0.271f, 1e-6);
  EXPECT_EQ(tracker.Current(MemoryCategory::kOptimizerState), 4);
}

TEST(Optimizer, SgdWithoutMomentumKeepsNoState) {
  OptimizerConfig c;
  c.type = OptimizerType::kSGD;
  MemoryTracker tracker;
  Optimizer opt(c, 10, &tracker);
  EXPECT_EQ(tracker.Current(MemoryCategory::kOptimizerState), 0);
  EXPECT_TRUE(opt.StateBuffers().empty());
}

TEST(Clip, ScalesToMaxNormAndReportsThePreClipNorm) {
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_NEAR(ClipGradNorm(g.data(), 2, 1.0), 5.0, 1e-9);
  EXPECT_NEAR(std::hypot(g[0], g[1]), 1.0, 1e-5);
  std::vector<float> small = {0.3f, 0.4f};
  ClipGradNorm(small.data(), 2, 1.0);
  EXPECT_FLOAT_EQ(small[0], 0.3f);  // below the threshold: untouched
}

SchedulerConfig Warmup(SchedulerType type, WarmupType wt) {
  SchedulerConfig s;
  s.type = type;
  s.warmup_min_lr = 0.0;
  s.warmup_max_lr = 0.001;
  s.warmup_num_steps = 10;
  s.warmup_type = wt;
  s.total_num_steps = 110;
  return s;
}

TEST(LrSchedule, WarmupLRLogAndLinear) {
  SchedulerConfig s = Warmup(SchedulerType::kWarmupLR, WarmupType::kLog);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0, 0), 0.0);  // log(1) = 0
  EXPECT_NEAR(LearningRateAt(s, 0, 4), 0.001 * std::log(5.0) / std::log(10.0), 1e-15);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0, 10), 0.001);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0, 500), 0.001);
  s.warmup_type = WarmupType::kLinear;
  EXPECT_NEAR(LearningRateAt(s, 0, 5), 0.0005, 1e-15);
}

TEST(LrSchedule, WarmupDecayLRDecaysLinearlyToZero) {
  SchedulerConfig s = Warmup(SchedulerType::kWarmupDecayLR, WarmupType::kLinear);
  EXPECT_NEAR(LearningRateAt(s, 0, 10), 0.001, 1e-15);
  EXPECT_NEAR(LearningRateAt(s, 0, 60), 0.001 * 50.0 / 100.0, 1e-15);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0, 110), 0.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0, 200), 0.0);
}

TEST(LrSchedule, WarmupCosineLRScalesTheOptimizerLr) {
  SchedulerConfig s = Warmup(SchedulerType::kWarmupCosineLR, WarmupType::kLinear);
  s.warmup_min_ratio = 0.1;
  s.cos_min_ratio = 0.01;
  const double base = 0.5;
  EXPECT_NEAR(LearningRateAt(s, base, 0), base * 0.1, 1e-15);
  EXPECT_NEAR(LearningRateAt(s, base, 5), base * (0.1 + 0.5 * 0.9), 1e-15);
  // first post-warm-up step: real_last_step = 1 of 100
  const double ratio = (1 + std::cos(M_PI * 1.0 / 100.0)) / 2;
  EXPECT_NEAR(LearningRateAt(s, base, 10), base * (0.01 + 0.99 * ratio), 1e-15);
  EXPECT_NEAR(LearningRateAt(s, base, 109), base * 0.01, 1e-12);
}

TEST(LrSchedule, NoSchedulerReturnsTheOptimizerLr) {
  SchedulerConfig s;
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 3e-4, 12345), 3e-4);
}

TEST(LrSchedule, WarmupShorterThanTwoIsClampedLikeDeepSpeed) {
  SchedulerConfig s = Warmup(SchedulerType::kWarmupLR, WarmupType::kLog);
  s.warmup_num_steps = 0;
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0, 0), 0.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(s, 0, 2), 0.001);
}

}  // namespace
}  // namespace dst

namespace dst {
namespace {

// 0/1 Adam on one element, one rank, against its rule written out: two
// variance steps, then frozen: local steps accumulated, each synchronising
// step (interval 1, then 2 after two of them) replays them from the
// accumulator and rebuilds the momentum.
TEST(Optimizer, ZeroOneAdamFollowsItsScheduleOnOneRank) {
  OptimizerConfig c;
  c.type = OptimizerType::kZeroOneAdam;
  c.lr = 0.01;
  c.betas = {0.9, 0.99};
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  c.bias_correction = false;
  c.var_freeze_step = 2;
  c.var_update_scaler = 100;
  c.local_step_scaler = 2;
  c.local_step_clipper = 4;
  MemoryTracker tracker;
  Optimizer opt(c, 1, &tracker);
  float p = 1.0f;
  double rp = 1.0, m = 0, v = 0, acc = 0, lrs = 0;
  const char *kinds[] = {"var", "var", "sync", "sync", "local", "sync"};
  for (int step = 1; step <= 6; ++step) {
    const float g = float(0.5 - 0.1 * step);
    opt.Step(&p, &g, c.lr);
    const std::string kind = kinds[step - 1];
    if (kind == "var") {
      m = 0.9 * m + 0.1 * g;
      v = 0.99 * v + 0.01 * g * g;
      rp -= c.lr * (m / (std::sqrt(v) + c.eps) + c.weight_decay * rp);
      continue;
    }
    const double denom = std::sqrt(v) + c.eps;
    m = 0.9 * m + 0.1 * g;
    const double d = -c.lr * (m / denom + c.weight_decay * rp);
    rp += d, acc += d, lrs += c.lr;
    if (kind == "sync") {
      rp -= acc;
      acc *= denom;
      m = -acc / lrs;
      rp += acc / denom;
      acc = 0, lrs = 0;
    }
    EXPECT_NEAR(p, rp, 1e-6) << "step " << step << " (" << kind << ")";
    EXPECT_NEAR(opt.StateBuffers()[0].data[0], m, 1e-6) << "momentum, step " << step;
  }
}

}  // namespace
}  // namespace dst
