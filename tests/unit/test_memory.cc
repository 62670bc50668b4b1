// Memory accounting: every buffer is charged to its category, exactly.
#include <gtest/gtest.h>

#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/optim/optimizer.h"
#include "core/runtime/memory.h"

namespace dst {
namespace {

TEST(Memory, BuffersChargeAndReleaseTheirCategory) {
  MemoryTracker tracker;
  {
    Buffer<float> a(&tracker, MemoryCategory::kActivations, 1000);
    Buffer<float> b(&tracker, MemoryCategory::kGradients, 10);
    EXPECT_EQ(tracker.Current(MemoryCategory::kActivations), 4000);
    EXPECT_EQ(tracker.Current(MemoryCategory::kGradients), 40);
    EXPECT_EQ(tracker.TotalCurrent(), 4040);
    Buffer<float> moved = std::move(a);
    EXPECT_EQ(tracker.Current(MemoryCategory::kActivations), 4000);
  }
  EXPECT_EQ(tracker.TotalCurrent(), 0);
  EXPECT_EQ(tracker.Peak(MemoryCategory::kActivations), 4000);
  EXPECT_EQ(tracker.TotalPeak(), 4040);
}

TEST(Memory, AFailedAllocationSaysHowMuchForWhatAndWhatWasAvailable) {
  MemoryTracker tracker;
  Buffer<float> held(&tracker, MemoryCategory::kParameters, 1024);
  try {
    Buffer<float> huge(&tracker, MemoryCategory::kOptimizerState, size_t(1) << 46);  // 256 TiB
    FAIL() << "a 256 TiB allocation succeeded";
  } catch (const AllocationError &e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot allocate 256.00 TiB for optimizer_state in host memory"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("this rank holds 4.00 KiB already"), std::string::npos) << message;
    EXPECT_NE(message.find("the host has "), std::string::npos) << message;
  }
  EXPECT_EQ(tracker.TotalCurrent(), 4096);  // nothing charged for the failed one
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1.5 * (1 << 30)), "1.50 GiB");
}

TEST(Memory, ModelStateIsSixteenBytesPerParameterWithAdamW) {
  Result<ModelSpec> spec = ParseModelSpec(
      R"({"type":"gpt","vocab_size":256,"n_ctx":16,"n_layer":2,"n_head":2,"d_model":32})");
  ASSERT_TRUE(spec.ok());
  MemoryTracker tracker;
  Model<float> model(spec.value(), {2, 16, 1}, &tracker);
  OptimizerConfig adamw;
  Optimizer opt(adamw, model.params().size(), &tracker);
  const int64_t psi = model.params().size();
  // GPT-2 parameter count: wte + wpe + L * 12C^2 + 13C, + ln_f; tied head.
  const int64_t C = 32, L = 2;
  EXPECT_EQ(psi, 256 * C + 16 * C + L * (12 * C * C + 13 * C) + 2 * C);
  EXPECT_EQ(tracker.Current(MemoryCategory::kParameters), 4 * psi);
  EXPECT_EQ(tracker.Current(MemoryCategory::kGradients), 4 * psi);
  EXPECT_EQ(tracker.Current(MemoryCategory::kOptimizerState), 8 * psi);
  EXPECT_GT(tracker.Current(MemoryCategory::kActivations), 0);
}

}  // namespace
}  // namespace dst
