// fp16 / bf16 conversions on edge values: zeros, subnormals, max finite,
// overflow, infinities, NaN, and rounding ties (to even). The F16C array path
// must agree bit for bit with the scalar one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <omp.h>

#include "core/precision/convert.h"
#include "core/precision/half_ops.h"
#include "core/runtime/rng.h"

namespace dst {
namespace {

float Bits(uint32_t u) {
  return std::bit_cast<float>(u);
}

TEST(Fp16, ExactValuesRoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, -65504.0f, 0.000061035156f /* 2^-14 */,
                  0.000000059604645f /* 2^-24, smallest subnormal */}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(v)), v) << v;
  }
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);  // max finite
  EXPECT_EQ(FloatToHalf(0.000000059604645f), 0x0001);
}

TEST(Fp16, OverflowInfinityAndNan) {
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);  // below the midpoint to 65536: stays finite
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // the midpoint rounds (to even) to inf
  EXPECT_EQ(FloatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7C00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  EXPECT_EQ(FloatToHalf(std::nanf("")) & 0x7C00, 0x7C00);
}

TEST(Fp16, TiesRoundToEven) {
  // Between 1 and 1 + 2^-10 the midpoint is 1 + 2^-11: even mantissa (1.0) wins.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // Between 1 + 2^-10 (odd) and 1 + 2^-9 (even): rounds up to the even one.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Subnormal tie: 1.5 x 2^-24 -> 2 x 2^-24 (even); 2.5 x 2^-24 -> 2 x 2^-24.
  EXPECT_EQ(FloatToHalf(1.5f * std::ldexp(1.0f, -24)), 0x0002);
  EXPECT_EQ(FloatToHalf(2.5f * std::ldexp(1.0f, -24)), 0x0002);
  // Below half the smallest subnormal: flushes to zero.
  EXPECT_EQ(FloatToHalf(0.49f * std::ldexp(1.0f, -24)), 0x0000);
}

TEST(Fp16, ArrayPathMatchesScalarBitForBit) {
  std::vector<float> in;
  for (uint32_t i = 0; i < 200000; ++i) {
    const uint64_t r = Mix64(i);
    // Mostly values in the fp16 range, some anywhere (inf, nan, subnormal floats).
    in.push_back(i % 4 ? float(StandardNormal(1, 2, i) * std::ldexp(1.0, int(r % 40) - 26))
                       : Bits(uint32_t(r)));
  }
  std::vector<uint16_t> vec(in.size());
  FloatToHalf(in.data(), vec.data(), int64_t(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t scalar = FloatToHalf(in[i]);
    if (std::isnan(in[i])) {
      ASSERT_EQ(vec[i] & 0x7C00, 0x7C00);
      ASSERT_NE(vec[i] & 0x3FF, 0);
      continue;
    }
    ASSERT_EQ(vec[i], scalar) << "input " << in[i] << " bits " << std::bit_cast<uint32_t>(in[i]);
  }
  std::vector<float> back(in.size());
  HalfToFloat(vec.data(), back.data(), int64_t(vec.size()));
  for (size_t i = 0; i < vec.size(); ++i) {
    const float s = HalfToFloat(vec[i]);
    if (std::isnan(s)) {
      ASSERT_TRUE(std::isnan(back[i]));
    } else {
      ASSERT_EQ(back[i], s) << vec[i];
    }
  }
}

TEST(Bf16, RoundToNearestEvenAndSpecials) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(FloatToBFloat16(Bits(0x7F7F7FFFu)), 0x7F7F);                  // max finite stays
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(Bits(0x7F800001u)))));  // sNaN kept NaN
  EXPECT_EQ(FloatToBFloat16(Bits(0x00010000u)), 0x0001);                         // subnormal
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  for (float v : {0.5f, -3.0f, 1024.0f, std::ldexp(1.0f, -130)})
    EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(v)), v) << v;
}

TEST(Bf16, ArrayPathMatchesScalar) {
  std::vector<float> in(1001);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(StandardNormal(3, 4, i) * 1e3);
  std::vector<uint16_t> out(in.size());
  FloatToBFloat16(in.data(), out.data(), int64_t(in.size()));
  std::vector<float> back(in.size());
  BFloat16ToFloat(out.data(), back.data(), int64_t(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i], FloatToBFloat16(in[i]));
    ASSERT_LE(std::fabs(back[i] - in[i]), std::fabs(in[i]) * std::ldexp(1.0f, -8));
  }
}

// The vector array path equals the scalar form bit for bit over any bits:
// NaNs (signalling too, either sign), infinities, subnormals, ties, the
// largest finite values (rounding up to inf), and a tail past the last eight.
TEST(Bf16, ArrayPathMatchesScalarBitForBitOverAnyBits) {
  std::vector<float> in;
  for (uint32_t i = 0; i < 200003; ++i) in.push_back(Bits(uint32_t(Mix64(i))));
  for (uint32_t special :
       {0x7F800000u, 0xFF800000u, 0x7F800001u, 0xFFBFFFFFu, 0x7FC00000u, 0x7F7FFFFFu, 0x7F7F8000u,
        0x00008000u, 0x3F808000u, 0x3F818000u, 0x80000000u, 0x00000001u, 0x807FFFFFu})
    in.push_back(Bits(special));
  std::vector<uint16_t> vec(in.size());
  FloatToBFloat16(in.data(), vec.data(), int64_t(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(vec[i], FloatToBFloat16(in[i])) << "bits " << std::bit_cast<uint32_t>(in[i]);
  std::vector<float> back(vec.size());
  BFloat16ToFloat(vec.data(), back.data(), int64_t(vec.size()));
  for (size_t i = 0; i < vec.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(BFloat16ToFloat(vec[i])))
        << vec[i];
}

// The one-pass rounding (and its 16-bit copy) equals the two array
// conversions bit for bit, in both formats, over any bits.
TEST(RoundThrough, EqualsTheTwoConversionsBitForBit) {
  std::vector<float> in;
  for (uint32_t i = 0; i < 100003; ++i) in.push_back(Bits(uint32_t(Mix64(i + 7))));
  for (bool bf16 : {true, false}) {
    std::vector<uint16_t> want16(in.size()), got16(in.size());
    std::vector<float> want(in.size()), got = in, alone = in;
    if (bf16) {
      FloatToBFloat16(in.data(), want16.data(), int64_t(in.size()));
      BFloat16ToFloat(want16.data(), want.data(), int64_t(in.size()));
      RoundThroughBFloat16(got.data(), got16.data(), int64_t(in.size()));
      RoundThroughBFloat16(alone.data(), nullptr, int64_t(in.size()));
    } else {
      FloatToHalf(in.data(), want16.data(), int64_t(in.size()));
      HalfToFloat(want16.data(), want.data(), int64_t(in.size()));
      RoundThroughHalf(got.data(), got16.data(), int64_t(in.size()));
      RoundThroughHalf(alone.data(), nullptr, int64_t(in.size()));
    }
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(got16[i], want16[i]) << (bf16 ? "bf16 " : "fp16 ") << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(alone[i]), std::bit_cast<uint32_t>(want[i])) << i;
    }
  }
}

// The storage conversions split a large array over the OpenMP threads: with
// two threads and a length that is no multiple of the pieces, the bits are
// the serial conversions' (each element converted on its own).
TEST(HalfOps, ThreadedConversionsEqualTheSerialOnesBitForBit) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  const int64_t n = 300007;  // > 4 pieces of 2^14, with a ragged last piece
  std::vector<float> in(static_cast<size_t>(n)), add(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = float(int64_t(Mix64(i + 3) % 20001) - 10000) / 997.0f;
    add[i] = float(int64_t(Mix64(i + 11) % 2001) - 1000) / 1013.0f;
  }
  for (Half h : {Half::kBf16, Half::kFp16}) {
    const bool bf16 = h == Half::kBf16;
    std::vector<uint16_t> want16(in.size()), got16(in.size()), acc(in.size()), acc_want(in.size());
    std::vector<float> want(in.size()), got(in.size()), round = in;
    for (size_t i = 0; i < in.size(); ++i) {  // one element at a time: the reference
      want16[i] = bf16 ? FloatToBFloat16(in[i]) : FloatToHalf(in[i]);
      want[i] = bf16 ? BFloat16ToFloat(want16[i]) : HalfToFloat(want16[i]);
      const float sum = want[i] + add[i];
      acc_want[i] = bf16 ? FloatToBFloat16(sum) : FloatToHalf(sum);
    }
    FromFloat(h, in.data(), got16.data(), n);
    ToFloat(h, got16.data(), got.data(), n);
    std::vector<uint16_t> stash(in.size());
    FromFloatRounding(h, round.data(), stash.data(), n);
    acc = got16;
    AccumulateInto(h, add.data(), acc.data(), n);
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(got16[i], want16[i]) << HalfName(h) << " " << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << i;
      ASSERT_EQ(stash[i], want16[i]) << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(round[i]), std::bit_cast<uint32_t>(want[i])) << i;
      ASSERT_EQ(acc[i], acc_want[i]) << HalfName(h) << " " << i;
    }
    // The sum of squares: 1024-element chunks each summed in order, in
    // double, the chunk sums added in order (more than one group of chunks;
    // and a ragged last chunk among eight summed side by side: 7173).
    for (const int64_t len : {n, int64_t(7173)}) {
      double total = 0;
      for (int64_t c = 0; c < len; c += 1024) {
        double part = 0;
        for (int64_t i = c; i < std::min(len, c + 1024); ++i)
          part += double(want[size_t(i)]) * double(want[size_t(i)]);
        total += part;
      }
      EXPECT_EQ(std::bit_cast<uint64_t>(SumOfSquares16(h, want16.data(), len)),
                std::bit_cast<uint64_t>(total))
          << HalfName(h) << " " << len;
    }
  }
  omp_set_num_threads(threads);
}

}  // namespace
}  // namespace dst
