// CPU-Adam: the AVX-512, AVX2 and scalar paths agree bit for bit (weights,
// moments, the 16-bit copy), over tails shorter than a vector, Adam and
// AdamW, a gradient multiplier, fp16 and bf16 copies, and non-finite values;
// the threaded step equals one thread's; and it is the Adam of
// cpu::AdamUpdate up to rounding (which may fuse multiply-adds).
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/cpu/cpu_adam.h"
#include "core/kernels/cpu/optimizers.h"

namespace dst::cpu {
namespace {

struct State {
  std::vector<float> param, grad, m, v;
  std::vector<uint16_t> half;
  explicit State(int64_t n, uint32_t seed) : param(n), grad(n), m(n), v(n), half(n, 0) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
      param[i] = normal(rng);
      grad[i] = normal(rng) * 1e-2f;
      m[i] = normal(rng) * 1e-3f;
      v[i] = std::abs(normal(rng)) * 1e-5f;
    }
    // Edge values: a zero gradient, a huge and a tiny one, a NaN and an inf.
    grad[0] = 0.0f;
    if (n > 2) {
      grad[1] = 3e30f;
      grad[2] = 1e-30f;
    }
    if (n > 40) {
      grad[37] = std::numeric_limits<float>::quiet_NaN();
      param[38] = std::numeric_limits<float>::infinity();
    }
  }
  CpuAdamRange Range(float mul, Half half, bool copy) {
    return {param.data(),
            grad.data(),
            m.data(),
            v.data(),
            int64_t(param.size()),
            mul,
            copy ? half_out() : nullptr,
            half};
  }
  uint16_t *half_out() { return half.data(); }
};

bool SameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectSame(const State &a, const State &b, const char *what) {
  EXPECT_TRUE(SameBits(a.param, b.param)) << what << ": weights";
  EXPECT_TRUE(SameBits(a.m, b.m)) << what << ": exp_avg";
  EXPECT_TRUE(SameBits(a.v, b.v)) << what << ": exp_avg_sq";
  EXPECT_EQ(a.half, b.half) << what << ": 16-bit copy";
}

TEST(CpuAdam, EveryPathAgreesBitForBit) {
  const bool avx512 = BestSimdPath() == SimdPath::kAvx512;
  for (const int64_t n : {int64_t(1), int64_t(7), int64_t(15), int64_t(61), int64_t(1037)})
    for (const bool decoupled : {false, true})
      for (const Half half : {Half::kFp16, Half::kBf16}) {
        const AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.1, 7, decoupled};
        State scalar(n, 5), avx2(n, 5), wide(n, 5);
        CpuAdamUpdate(scalar.Range(0.25f, half, true), h, SimdPath::kScalar);
        CpuAdamUpdate(avx2.Range(0.25f, half, true), h, SimdPath::kAvx2);
        ExpectSame(scalar, avx2, "avx2 vs scalar");
        if (avx512) {
          CpuAdamUpdate(wide.Range(0.25f, half, true), h, SimdPath::kAvx512);
          ExpectSame(scalar, wide, "avx512 vs scalar");
        }
      }
  if (!avx512) GTEST_SKIP() << "no AVX-512 on this CPU: the AVX2 and scalar paths were compared";
}

TEST(CpuAdam, TheThreadedStepEqualsOneThreadAndTheCopyIsTheWeights) {
  const AdamHyper h{3e-3, 0.9, 0.95, 1e-8, 0.01, 3, true};
  // Ranges shorter than a thread's cache-line share, too (1 element on 3
  // threads once updated nothing).
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  for (int64_t n : {1, 5, 64, 65, 191, 100003}) {
    State one(n, 9), threaded(n, 9);
    CpuAdamUpdate(one.Range(1.0f, Half::kBf16, true), h, BestSimdPath());
    CpuAdamStep(threaded.Range(1.0f, Half::kBf16, true), h);
    ExpectSame(one, threaded, ("threaded vs one thread, n " + std::to_string(n)).c_str());
    EXPECT_NE(one.param, State(n, 9).param) << "n " << n << ": nothing was updated";
  }
  omp_set_num_threads(saved);
  State one(100003, 9);
  CpuAdamUpdate(one.Range(1.0f, Half::kBf16, true), h, BestSimdPath());
  for (size_t i = 100; i < 200; ++i)  // the copy is the updated weights, rounded
    EXPECT_LE(std::abs(std::bit_cast<float>(uint32_t(one.half[i]) << 16) - one.param[i]),
              std::abs(one.param[i]) * 0.004f);
}

TEST(CpuAdam, IsTheAdamOfAdamUpdateUpToRounding) {
  for (const bool decoupled : {false, true}) {
    const AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.1, 11, decoupled};
    State fused(999, 3), reference(999, 3);
    CpuAdamStep(fused.Range(1.0f, Half::kBf16, false), h);
    AdamUpdate(reference.param.data(), reference.grad.data(), reference.m.data(),
               reference.v.data(), 999, h);
    for (size_t i = 3; i < 999; ++i) {
      if (i == 37 || i == 38) continue;  // the non-finite elements
      EXPECT_NEAR(fused.param[i], reference.param[i], 1e-6f * (1 + std::abs(reference.param[i])))
          << i;
      EXPECT_NEAR(fused.v[i], reference.v[i], 1e-6f * reference.v[i] + 1e-30f) << i;
    }
  }
}

// bias_correction false (DeepSpeed's FusedAdam option): the raw moments,
// p -= lr m / (sqrt(v) + eps), on every path, against the formula in double.
TEST(CpuAdam, WithoutBiasCorrectionUsesTheRawMoments) {
  const AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.0, 3, true, false};
  for (SimdPath path : {SimdPath::kScalar, BestSimdPath()}) {
    State s(257, 5);
    State ref(257, 5);
    CpuAdamUpdate(s.Range(1.0f, Half::kBf16, false), h, path);
    for (size_t i = 0; i < 257; ++i) {
      if (i < 3 || i == 37 || i == 38) continue;  // the edge values
      const double g = ref.grad[i];
      const double m = 0.9 * double(ref.m[i]) + 0.1 * g;
      const double v = 0.999 * double(ref.v[i]) + 0.001 * g * g;
      const double p = double(ref.param[i]) - 1e-3 * m / (std::sqrt(v) + 1e-8);
      EXPECT_NEAR(s.param[i], p, 1e-6 * (1 + std::abs(p))) << i;
    }
    // with the correction the step is larger by 1 / (1 - 0.9^3) where m dominates
    State corrected(257, 5);
    CpuAdamUpdate(corrected.Range(1.0f, Half::kBf16, false),
                  AdamHyper{1e-3, 0.9, 0.999, 1e-8, 0.0, 3, true, true}, path);
    EXPECT_NE(corrected.param[10], s.param[10]);
  }
}

}  // namespace
}  // namespace dst::cpu
