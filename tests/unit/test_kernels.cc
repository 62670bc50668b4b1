// Numerical kernels: the float fast paths against double references.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/loss.h"
#include "core/kernels/cpu/reduce.h"
#include "core/kernels/elementwise_math.h"

namespace dst {
namespace {

TEST(Kernels, FastExpIsAccurateOverTheFloatRange) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.01f) {
    const double ref = std::exp(double(x));
    worst = std::max(worst, std::fabs(double(math::FastExp(x)) - ref) / ref);
  }
  EXPECT_LT(worst, 5e-7);
}

TEST(Kernels, FastExpSaturatesInsteadOfOverflowing) {
  EXPECT_TRUE(std::isfinite(math::FastExp(1000.0f)));
  EXPECT_LT(math::FastExp(-1000.0f), 1e-37f);
  EXPECT_TRUE(std::isnan(math::FastExp(std::nanf(""))));
}

TEST(Kernels, GeluFloatMatchesDoubleReference) {
  for (float x = -8.0f; x <= 8.0f; x += 0.001f) {
    const double xd = x;
    const double ref = 0.5 * xd * (1 + std::tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd)));
    ASSERT_NEAR(math::Gelu(x), ref, 2e-6 * (1 + std::fabs(ref))) << "x = " << x;
  }
}

TEST(Kernels, CausalSoftmaxRowsSumToOneAndMaskTheFuture) {
  const int64_t T = 5;
  std::vector<float> scores(T * T);
  for (int64_t i = 0; i < T * T; ++i) scores[i] = float(i % 7) - 3.0f;
  for (int64_t t = 0; t < T; ++t) cpu::CausalSoftmaxRow(scores.data() + t * T, t, T);
  for (int64_t t = 0; t < T; ++t) {
    double sum = 0;
    for (int64_t j = 0; j < T; ++j) {
      if (j > t) {
        EXPECT_EQ(scores[t * T + j], 0.0f);
      }
      sum += scores[t * T + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(Kernels, CrossEntropyOfUniformLogitsIsLogV) {
  const int64_t rows = 4, V = 256;
  std::vector<float> logits(rows * V, 0.5f);
  std::vector<int32_t> targets = {0, 17, -1, 255};
  int64_t counted = 0;
  const float loss = cpu::SoftmaxCrossEntropyForward(logits.data(), targets.data(), rows, V, &counted);
  EXPECT_EQ(counted, 3);
  EXPECT_NEAR(loss, std::log(256.0), 1e-5);
}

TEST(Kernels, ChunkedSumIsExactlyRepeatable) {
  std::vector<float> x(100003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i)) * 1e-3f;
  const double a = cpu::SumOfSquares(x.data(), int64_t(x.size()));
  const double b = cpu::SumOfSquares(x.data(), int64_t(x.size()));
  EXPECT_EQ(a, b);
  double ref = 0;
  for (float v : x) ref += double(v) * v;
  EXPECT_NEAR(a, ref, 1e-12 * ref);
}

}  // namespace
}  // namespace dst
