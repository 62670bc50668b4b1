// Numerical kernels: the float fast paths against double references.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/loss.h"
#include "core/kernels/cpu/reduce.h"
#include "core/kernels/cpu/vector_math.h"
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
    const double ref =
        0.5 * xd * (1 + std::tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd)));
    ASSERT_NEAR(math::Gelu(x), ref, 2e-6 * (1 + std::fabs(ref))) << "x = " << x;
  }
}

// The AVX2 paths (8 lanes plus a scalar tail) against double references.
TEST(Kernels, VectorGeluAndItsGradientMatchDouble) {
  const int64_t n = 16003;  // not a multiple of 8: exercises the tail
  std::vector<float> x(n), y(n), g(n), ones(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = -9.0f + 18.0f * float(i) / float(n);
  cpu::GeluRange(x.data(), y.data(), 0, n);
  cpu::GeluGradRange(ones.data(), x.data(), g.data(), 0, n);
  for (int64_t i = 0; i < n; ++i) {
    const double xd = x[i];
    ASSERT_NEAR(y[i], math::Gelu(xd), 2e-6 * (1 + std::fabs(xd))) << "x = " << xd;
    ASSERT_NEAR(g[i], math::GeluGrad(xd), 2e-6) << "x = " << xd;
  }
}

TEST(Kernels, VectorExpShiftedAndSumMatchesDouble) {
  std::vector<float> x(37);
  std::vector<double> ref(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = ref[i] = -20.0 + double(i);
  double ref_sum = 0;
  for (double &v : ref) ref_sum += (v = std::exp(v - 3.0));
  const float sum = cpu::ExpShiftedAndSum(x.data(), int64_t(x.size()), 3.0f);
  EXPECT_NEAR(sum, ref_sum, 1e-6 * ref_sum);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], ref[i], 5e-7 * ref[i]);
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
  const float loss =
      cpu::SoftmaxCrossEntropyForward(logits.data(), targets.data(), rows, V, &counted);
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
  // The bits: 64 chunks [n c / 64, n (c + 1) / 64), each summed in index
  // order, the chunk sums added in order (chunks of unequal lengths here).
  const int64_t n = int64_t(x.size());
  double chunked = 0;
  for (int64_t c = 0; c < cpu::kReduceChunks; ++c) {
    double part = 0;
    for (int64_t i = n * c / cpu::kReduceChunks; i < n * (c + 1) / cpu::kReduceChunks; ++i)
      part += double(x[size_t(i)]) * x[size_t(i)];
    chunked += part;
  }
  EXPECT_EQ(std::bit_cast<uint64_t>(a), std::bit_cast<uint64_t>(chunked));
}

}  // namespace
}  // namespace dst
