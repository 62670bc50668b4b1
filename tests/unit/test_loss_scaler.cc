// The fp16 loss scaler's state machine against DeepSpeed's rules.
#include <gtest/gtest.h>

#include "core/precision/loss_scaler.h"

namespace dst {
namespace {

Fp16Config Dynamic(int power, int window, int hysteresis, double min_scale = 1,
                   bool consecutive = false) {
  Fp16Config c;
  c.enabled = true;
  c.loss_scale = 0;
  c.initial_scale_power = power;
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  c.min_loss_scale = min_scale;
  c.consecutive_hysteresis = consecutive;
  return c;
}

TEST(LossScaler, StartsAtTwoToTheInitialPower) {
  LossScaler s(Dynamic(16, 1000, 2));
  EXPECT_TRUE(s.enabled());
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 65536.0);
}

TEST(LossScaler, DisabledIsTheIdentity) {
  LossScaler s(Fp16Config{});
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_TRUE(s.Update(true).ok());
  EXPECT_EQ(s.scale(), 1.0);
}

TEST(LossScaler, OverflowHalvesOnceHysteresisIsUsedUp) {
  LossScaler s(Dynamic(10, 1000, 2));
  ASSERT_TRUE(s.Update(true).ok());  // first overflow: absorbed by hysteresis
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.state().hysteresis_left, 1);
  ASSERT_TRUE(s.Update(true).ok());  // second: halves
  EXPECT_EQ(s.scale(), 512.0);
  ASSERT_TRUE(s.Update(true).ok());  // stays at 1 left: halves again
  EXPECT_EQ(s.scale(), 256.0);
}

TEST(LossScaler, WindowOfCleanStepsDoublesAndRefillsHysteresis) {
  LossScaler s(Dynamic(4, 3, 2));
  ASSERT_TRUE(s.Update(true).ok());  // iteration 0 overflows, hysteresis 2 -> 1
  EXPECT_EQ(s.scale(), 16.0);
  ASSERT_TRUE(s.Update(false).ok());  // 1 step since overflow
  ASSERT_TRUE(s.Update(false).ok());  // 2
  EXPECT_EQ(s.scale(), 16.0);
  ASSERT_TRUE(s.Update(false).ok());  // 3 == window: doubles, hysteresis refilled
  EXPECT_EQ(s.scale(), 32.0);
  EXPECT_EQ(s.state().hysteresis_left, 2);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.Update(false).ok());
  EXPECT_EQ(s.scale(), 64.0);  // every further window too
}

TEST(LossScaler, WithoutOverflowTheFirstWindowAlsoDoubles) {
  LossScaler s(Dynamic(4, 2, 1));
  ASSERT_TRUE(s.Update(false).ok());  // (0 - -1) % 2 != 0
  EXPECT_EQ(s.scale(), 16.0);
  ASSERT_TRUE(s.Update(false).ok());  // (1 - -1) % 2 == 0
  EXPECT_EQ(s.scale(), 32.0);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsAfterEveryCleanStep) {
  LossScaler s(Dynamic(8, 1000, 3, 1, /*consecutive=*/true));
  ASSERT_TRUE(s.Update(true).ok());
  ASSERT_TRUE(s.Update(true).ok());
  EXPECT_EQ(s.state().hysteresis_left, 1);
  ASSERT_TRUE(s.Update(false).ok());
  EXPECT_EQ(s.state().hysteresis_left, 3);
  EXPECT_EQ(s.scale(), 256.0);
}

TEST(LossScaler, OverflowAtTheMinimumIsAClearError) {
  LossScaler s(Dynamic(1, 1000, 1, /*min_scale=*/1));
  ASSERT_TRUE(s.Update(true).ok());  // 2 -> 1
  EXPECT_EQ(s.scale(), 1.0);
  Status st = s.Update(true);
  EXPECT_EQ(st.code(), Code::kNumeric);
  EXPECT_NE(st.message().find("min_loss_scale"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("bf16"), std::string::npos) << st.message();
  EXPECT_EQ(s.scale(), 1.0);
}

TEST(LossScaler, MinimumBoundsTheDecrease) {
  LossScaler s(Dynamic(3, 1000, 1, /*min_scale=*/3));
  ASSERT_TRUE(s.Update(true).ok());
  EXPECT_EQ(s.scale(), 4.0);
  ASSERT_TRUE(s.Update(true).ok());
  EXPECT_EQ(s.scale(), 3.0);  // max(2, 3)
}

TEST(LossScaler, StaticScaleNeverChanges) {
  Fp16Config c;
  c.enabled = true;
  c.loss_scale = 128;
  LossScaler s(c);
  EXPECT_FALSE(s.dynamic());
  EXPECT_TRUE(s.Update(true).ok());
  EXPECT_TRUE(s.Update(false).ok());
  EXPECT_EQ(s.scale(), 128.0);
}

TEST(LossScaler, StateRoundTripsThroughJsonAndBadStateIsRefused) {
  LossScaler a(Dynamic(10, 5, 2));
  ASSERT_TRUE(a.Update(true).ok());
  ASSERT_TRUE(a.Update(true).ok());
  ASSERT_TRUE(a.Update(false).ok());
  LossScaler b(Dynamic(10, 5, 2));
  ASSERT_TRUE(b.FromJson(a.ToJson()).ok());
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.state().iteration, a.state().iteration);
  EXPECT_EQ(b.state().last_overflow, a.state().last_overflow);
  EXPECT_EQ(b.state().hysteresis_left, a.state().hysteresis_left);
  nlohmann::json bad = a.ToJson();
  bad["scale"] = -1;
  EXPECT_EQ(b.FromJson(bad).code(), Code::kCheckpoint);
  EXPECT_EQ(b.FromJson(nlohmann::json{{"scale", 2}}).code(), Code::kCheckpoint);
}

}  // namespace
}  // namespace dst
