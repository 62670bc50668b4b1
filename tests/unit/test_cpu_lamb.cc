// CPU-Lamb: the AVX-512, AVX2 and scalar paths agree bit for bit on the
// moments, the weights and the 16-bit copy (the squared-norm sums only up to
// summation order), over tails shorter than a vector, both eps placements,
// fp16 and bf16 copies; the threaded passes equal one thread's; the trust
// ratio is clamped, and 1 where a norm is zero.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/cpu/cpu_lamb.h"

namespace dst::cpu {
namespace {

struct State {
  std::vector<float> param, grad, m, v;
  std::vector<uint16_t> half;
  State(int64_t n, uint32_t seed) : param(n), grad(n), m(n), v(n), half(n, 0) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
      param[i] = normal(rng);
      grad[i] = normal(rng) * 1e-2f;
      m[i] = normal(rng) * 1e-3f;
      v[i] = std::abs(normal(rng)) * 1e-5f;
    }
  }
  LambRange Range(Half h) {
    return {param.data(),          grad.data(), m.data(),    v.data(),
            int64_t(param.size()), 0.5f,        half.data(), h};
  }
};

bool SameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectSame(const State &a, const State &b, const std::string &what) {
  EXPECT_TRUE(SameBits(a.param, b.param)) << what << ": weights";
  EXPECT_TRUE(SameBits(a.m, b.m)) << what << ": exp_avg";
  EXPECT_TRUE(SameBits(a.v, b.v)) << what << ": exp_avg_sq";
  EXPECT_EQ(a.half, b.half) << what << ": 16-bit copy";
}

void ExpectClose(const LambSums &a, const LambSums &b, const std::string &what) {
  EXPECT_NEAR(a.weight, b.weight, 1e-5 * a.weight) << what;
  EXPECT_NEAR(a.update, b.update, 1e-5 * a.update) << what;
}

TEST(CpuLamb, EveryPathAgreesBitForBit) {
  const bool avx512 = BestSimdPath() == SimdPath::kAvx512;
  std::vector<SimdPath> paths = {SimdPath::kAvx2};
  if (avx512) paths.push_back(SimdPath::kAvx512);
  for (const int64_t n : {int64_t(1), int64_t(7), int64_t(15), int64_t(61), int64_t(3037)})
    for (const bool inside : {false, true})
      for (const Half half : {Half::kFp16, Half::kBf16}) {
        LambHyper h{1e-3, 0.9, 0.999, 1e-8, 0.1, 7};
        h.eps_inside_sqrt = inside;
        State scalar(n, 5);
        const LambSums want = LambMomentsOn(scalar.Range(half), h, SimdPath::kScalar);
        const float trust = LambTrustRatio(want, h);
        LambApplyOn(scalar.Range(half), h, trust, SimdPath::kScalar);
        for (const SimdPath path : paths) {
          const std::string what =
              std::string(SimdPathName(path)) + " vs scalar, n " + std::to_string(n);
          State vec(n, 5);
          ExpectClose(LambMomentsOn(vec.Range(half), h, path), want, what);
          LambApplyOn(vec.Range(half), h, trust, path);
          ExpectSame(scalar, vec, what);
        }
      }
  if (!avx512) GTEST_SKIP() << "no AVX-512 on this CPU: the AVX2 and scalar paths were compared";
}

TEST(CpuLamb, TheThreadedPassesEqualOneThread) {
  const LambHyper h{3e-3, 0.9, 0.95, 1e-8, 0.01, 3};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  for (int64_t n : {int64_t(5), int64_t(65), int64_t(100003)}) {
    State one(n, 9), threaded(n, 9);
    const LambSums a = LambMomentsOn(one.Range(Half::kBf16), h, BestSimdPath());
    const LambSums b = LambMoments(threaded.Range(Half::kBf16), h);
    ExpectClose(a, b, "n " + std::to_string(n));
    LambApplyOn(one.Range(Half::kBf16), h, 0.7f, BestSimdPath());
    LambApply(threaded.Range(Half::kBf16), h, 0.7f);
    ExpectSame(one, threaded, "threaded vs one thread, n " + std::to_string(n));
    EXPECT_NE(one.param, State(n, 9).param) << "n " << n << ": nothing was updated";
  }
  omp_set_num_threads(saved);
}

TEST(CpuLamb, TheTrustRatioIsClampedAndOneWithoutANorm) {
  LambHyper h{1e-3, 0.9, 0.999, 1e-8, 0.0, 1};
  h.max_coeff = 2.0, h.min_coeff = 0.5;
  EXPECT_FLOAT_EQ(LambTrustRatio({16.0, 1.0}, h), 2.0f);   // 4, clamped
  EXPECT_FLOAT_EQ(LambTrustRatio({1.0, 100.0}, h), 0.5f);  // 0.1, clamped
  EXPECT_FLOAT_EQ(LambTrustRatio({2.25, 1.0}, h), 1.5f);   // inside
  EXPECT_FLOAT_EQ(LambTrustRatio({0.0, 1.0}, h), 1.0f);    // zero weights
  EXPECT_FLOAT_EQ(LambTrustRatio({1.0, 0.0}, h), 1.0f);    // zero update
  EXPECT_DOUBLE_EQ(LambStepSize(h), 1e-3 * std::sqrt(1 - 0.999) / (1 - 0.9));
  h.bias_correction = false;
  EXPECT_DOUBLE_EQ(LambStepSize(h), 1e-3);
}

}  // namespace
}  // namespace dst::cpu
