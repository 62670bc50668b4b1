// The AVX-512 forms of the GELU, SiLU-gate and softmax loops (vector_math_avx512.cc) equal their
// AVX2 forms bit for bit, over values that reach every branch of the exp
// range reduction (clamps, signs, zero, tiny and huge inputs) and over ranges
// whose ends are not multiples of 16 (the AVX2 and scalar loops take the
// rest). Skipped where the CPU has no AVX-512 or DSTRAIN_CPU_ISA caps it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/kernels/cpu/activations.h"
#include "core/kernels/cpu/vector_math.h"
#include "core/precision/convert.h"

namespace dst::cpu {
namespace {

std::vector<float> Inputs() {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(100003);
  for (float &v : x) v = normal(rng);
  const float specials[] = {0.0f,  -0.0f,  1e-30f, -1e-30f, 1e-3f, 5.0f,  -5.0f, 10.0f, -10.0f,
                            45.0f, -45.0f, 88.0f,  -88.0f,  1e4f,  -1e4f, 3e38f, -3e38f};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) x[i * 7] = specials[i];
  return x;
}

bool SameBits(const std::vector<float> &a, const std::vector<float> &b, size_t *at) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      *at = i;
      return false;
    }
  return true;
}

// The softmax's exp-and-sum: the values and the sum, bit for bit, for rows
// shorter than a vector, with tails of every length, and a vocabulary's.
TEST(VectorMath, Avx512ExpShiftedAndSumEqualsTheAvx2FormBitForBit) {
#if DST_HAVE_AVX2
  if (!Avx512Elementwise()) GTEST_SKIP() << "no AVX-512 here (or DSTRAIN_CPU_ISA=avx2)";
  const std::vector<float> inputs = Inputs();
  for (size_t n : {size_t(1), size_t(7), size_t(15), size_t(16), size_t(17), size_t(31), size_t(40),
                   size_t(256), size_t(1000), size_t(50257)}) {
    std::vector<float> wide(n), narrow(n);
    for (size_t i = 0; i < n; ++i) wide[i] = narrow[i] = inputs[(i * 7919) % inputs.size()];
    const float shift = 1.25f;
    const float sum_wide = ExpShiftedAndSum(wide.data(), int64_t(n), shift, true);
    const float sum_narrow = ExpShiftedAndSum(narrow.data(), int64_t(n), shift, false);
    size_t at = 0;
    EXPECT_TRUE(SameBits(wide, narrow, &at)) << "n=" << n << " at " << at;
    EXPECT_EQ(std::memcmp(&sum_wide, &sum_narrow, sizeof(float)), 0)
        << "n=" << n << ": " << sum_wide << " vs " << sum_narrow;
  }
#else
  GTEST_SKIP() << "built without AVX2";
#endif
}

TEST(VectorMath, Avx512GeluEqualsTheAvx2FormBitForBit) {
#if DST_HAVE_AVX2
  if (!Avx512Elementwise()) GTEST_SKIP() << "no AVX-512 here (or DSTRAIN_CPU_ISA=avx2)";
  const std::vector<float> x = Inputs();
  std::vector<float> dout = Inputs();
  std::reverse(dout.begin(), dout.end());
  const int64_t begin = 3, end = int64_t(x.size()) - 5;  // unaligned, tails of 0-15 left
  std::vector<float> wide(x.size()), narrow(x.size()), dwide(x.size()), dnarrow(x.size());
  GeluRange(x.data(), wide.data(), begin, end, true);
  GeluRange(x.data(), narrow.data(), begin, end, false);
  GeluGradRange(dout.data(), x.data(), dwide.data(), begin, end, true);
  GeluGradRange(dout.data(), x.data(), dnarrow.data(), begin, end, false);
  size_t at = 0;
  EXPECT_TRUE(SameBits(wide, narrow, &at))
      << "gelu(" << x[at] << "): " << wide[at] << " vs " << narrow[at];
  EXPECT_TRUE(SameBits(dwide, dnarrow, &at))
      << "gelu'(" << x[at] << "): " << dwide[at] << " vs " << dnarrow[at];
  // And both are the scalar formula's values to fp32 roundoff.
  for (int64_t i = begin; i < end; i += 997)
    EXPECT_NEAR(wide[size_t(i)], math::Gelu(x[size_t(i)]),
                1e-5f * (1.0f + std::fabs(x[size_t(i)])));
#else
  GTEST_SKIP() << "built without AVX2";
#endif
}

// The GELU backward from a bf16 stash reads gelu' from a table of every bf16
// value: the bits of GeluGradRange on the widened values, for all 65536 of
// them (NaNs, infinities and subnormals included) and any output gradient,
// through each of the product's forms (16 and 8 lanes; GeluGradRange's
// scalar tail, its last n % 8 values, computed as it computes them).
TEST(VectorMath, GeluGradientFromBf16EqualsGeluGradRangeOnEveryValue) {
  constexpr size_t kValues = size_t(1) << 16;
  std::vector<uint16_t> x16(kValues + 13);
  for (size_t i = 0; i < x16.size(); ++i) x16[i] = uint16_t(i * 40503u);  // every value, shuffled
  std::vector<float> x(x16.size()), dout = Inputs();
  dout.resize(x16.size());
  BFloat16ToFloat(x16.data(), x.data(), int64_t(x.size()));
  const int64_t n = int64_t(x.size());
  std::vector<float> expected(x.size()), from_table(x.size());
  GeluGradRange(dout.data(), x.data(), expected.data(), 0, n);
  const int64_t lanes = n - n % 8;  // GeluGradRange's vector lanes
  ASSERT_GT(n, lanes);
  for (bool wide : {Avx512Elementwise(), false}) {  // 16 lanes where the CPU has them
    from_table = expected;
    TableProduct(dout.data(), x16.data(), GeluGradOfBf16(), from_table.data(), lanes, wide);
    size_t at = 0;
    EXPECT_TRUE(SameBits(expected, from_table, &at))
        << (wide ? "16 lanes" : "8 lanes") << ": gelu'(" << x[at] << ") x " << dout[at] << ": "
        << expected[at] << " vs " << from_table[at];
  }
  // In place (dx = dout), as the layers call it.
  std::vector<float> in_place = dout;
  GeluGradOf16(in_place.data(), x16.data(), in_place.data(), n);
  size_t at = 0;
  EXPECT_TRUE(SameBits(expected, in_place, &at)) << "in place at " << at;
}

// SwiGLU's activation and its gradients: wide = narrow bit for bit, both the
// scalar formulas to fp32 roundoff.
TEST(VectorMath, Avx512SiluGateEqualsTheAvx2FormBitForBit) {
#if DST_HAVE_AVX2
  if (!Avx512Elementwise()) GTEST_SKIP() << "no AVX-512 here (or DSTRAIN_CPU_ISA=avx2)";
  const std::vector<float> gate = Inputs();
  std::vector<float> up = Inputs(), dout = Inputs();
  std::reverse(up.begin(), up.end());
  std::rotate(dout.begin(), dout.begin() + 11, dout.end());
  const int64_t begin = 3, end = int64_t(gate.size()) - 5;
  const size_t n = gate.size();
  std::vector<float> wide(n), narrow(n), dg_wide(n), dg_narrow(n), du_wide(n), du_narrow(n);
  SiluMulRange(gate.data(), up.data(), wide.data(), begin, end, true);
  SiluMulRange(gate.data(), up.data(), narrow.data(), begin, end, false);
  SiluMulGradRange(dout.data(), gate.data(), up.data(), dg_wide.data(), du_wide.data(), begin, end,
                   true);
  SiluMulGradRange(dout.data(), gate.data(), up.data(), dg_narrow.data(), du_narrow.data(), begin,
                   end, false);
  size_t at = 0;
  EXPECT_TRUE(SameBits(wide, narrow, &at))
      << "silu gate at " << at << " (" << gate[at + begin] << ")";
  EXPECT_TRUE(SameBits(dg_wide, dg_narrow, &at)) << "d gate at " << at << " (" << gate[at] << ")";
  EXPECT_TRUE(SameBits(du_wide, du_narrow, &at)) << "d up at " << at << " (" << gate[at] << ")";
  for (int64_t i = begin; i < end; i += 997) {
    const float g = gate[size_t(i)], u = up[size_t(i)], d = dout[size_t(i)];
    if (std::fabs(g) > 80.0f)
      continue;  // beyond the exp clamp the forms agree, the formula differs
    const float tol = 1e-5f * (1.0f + std::fabs(g)) * (1.0f + std::fabs(u)) * (1.0f + std::fabs(d));
    EXPECT_NEAR(wide[size_t(i - begin)], math::Silu(g) * u, tol) << g;
    EXPECT_NEAR(dg_wide[size_t(i)], d * u * math::SiluGrad(g), tol) << g;
    EXPECT_NEAR(du_wide[size_t(i)], d * math::Silu(g), tol) << g;
  }
#else
  GTEST_SKIP() << "built without AVX2";
#endif
}

}  // namespace
}  // namespace dst::cpu
