// Gradient codecs: top-k keeps exactly the largest magnitudes (raw and
// Huffman-coded indices decode alike, Huffman smaller), 1-bit and 2-bit
// quantise per chunk as documented, what the receivers decode is what the
// encoder reported (so residuals are exact), error feedback delivers a
// constant gradient in full over time, NaN travels, and corrupt payloads are
// named.
#include "core/zero/grad_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dst {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float &x : v) x = normal(rng);
  return v;
}

struct Encoded {
  std::vector<uint8_t> payload;
  std::vector<float> decoded;
};

Encoded Encode(const CodecOptions &o, const std::vector<float> &v) {
  const int64_t n = int64_t(v.size());
  Encoded e;
  e.payload.resize(size_t(MaxPayloadBytes(o, n)));
  e.decoded.resize(v.size());
  std::vector<uint32_t> order(v.size());
  const int64_t bytes =
      EncodeGradient(o, v.data(), n, e.payload.data(), e.decoded.data(), order.data());
  EXPECT_EQ(bytes % 4, 0);
  EXPECT_LE(bytes, MaxPayloadBytes(o, n));
  if (FixedPayloadBytes(o, n) >= 0) {
    EXPECT_EQ(bytes, FixedPayloadBytes(o, n));
  }
  e.payload.resize(size_t(bytes));
  return e;
}

// What a receiver decodes equals what the encoder said it would.
void ExpectReceiversDecodeTheSame(const CodecOptions &o, const Encoded &e) {
  std::vector<float> sum(e.decoded.size(), 0.0f);
  ASSERT_TRUE(DecodeAddGradient(o, e.payload.data(), int64_t(e.payload.size()), int64_t(sum.size()),
                                sum.data())
                  .ok());
  for (size_t i = 0; i < sum.size(); ++i) ASSERT_EQ(sum[i], e.decoded[i]) << i;
}

TEST(GradCodec, TopKKeepsTheLargestMagnitudesAndHuffmanShrinksTheIndices) {
  const std::vector<float> v = Random(100000, 1);
  CodecOptions o;
  o.topk_ratio = 0.01;
  const Encoded raw = Encode(o, v);
  EXPECT_EQ(TopKCount(0.01, 100000), 1000);
  EXPECT_EQ(raw.payload.size(), 8000u);
  // The 1000th largest magnitude is the threshold: kept at or above, zero below.
  std::vector<float> mags(v.size());
  for (size_t i = 0; i < v.size(); ++i) mags[i] = std::fabs(v[i]);
  std::nth_element(mags.begin(), mags.begin() + 999, mags.end(), std::greater<float>());
  const float threshold = mags[999];
  int kept = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::fabs(v[i]) >= threshold) {
      EXPECT_EQ(raw.decoded[i], v[i]);
      ++kept;
    } else {
      EXPECT_EQ(raw.decoded[i], 0.0f);
    }
  }
  EXPECT_EQ(kept, 1000);
  ExpectReceiversDecodeTheSame(o, raw);
  o.huffman = true;
  const Encoded coded = Encode(o, v);
  EXPECT_EQ(coded.decoded, raw.decoded);
  ExpectReceiversDecodeTheSame(o, coded);
  // 4 bytes of value + about 9 bits of index (mean gap 100) instead of 4 bytes.
  EXPECT_LT(coded.payload.size(), 4000u + 1500u) << coded.payload.size();
}

TEST(GradCodec, HuffmanHandlesOneSymbolEdgesAndWholeVectors) {
  CodecOptions o;
  o.huffman = true;
  for (double ratio : {1e-9, 0.5, 1.0}) {  // one entry, half, all (every delta 1)
    o.topk_ratio = ratio;
    for (int64_t n : {1, 7, 4096}) {
      const Encoded e = Encode(o, Random(n, uint32_t(n)));
      ExpectReceiversDecodeTheSame(o, e);
    }
  }
  // The last index of a large vector (a delta of 31 bits and more).
  std::vector<float> v(3000000, 0.0f);
  v.back() = 5.0f;
  o.topk_ratio = 1e-9;
  const Encoded e = Encode(o, v);
  EXPECT_EQ(e.decoded.back(), 5.0f);
  ExpectReceiversDecodeTheSame(o, e);
}

TEST(GradCodec, OneBitSendsSignsAtTheChunksMeanMagnitude) {
  std::vector<float> v = Random(kCodecChunk + 100, 2);
  CodecOptions o;
  o.kind = CodecKind::kOneBit;
  const Encoded e = Encode(o, v);
  EXPECT_EQ(int64_t(e.payload.size()), 4 * 2 + (int64_t(v.size()) + 7) / 8 / 4 * 4 + 4);
  double mean0 = 0;
  for (int64_t i = 0; i < kCodecChunk; ++i) mean0 += std::fabs(v[size_t(i)]);
  mean0 /= double(kCodecChunk);
  for (int64_t i = 0; i < kCodecChunk; ++i)
    EXPECT_FLOAT_EQ(e.decoded[size_t(i)], v[size_t(i)] < 0 ? -float(mean0) : float(mean0));
  ExpectReceiversDecodeTheSame(o, e);
}

TEST(GradCodec, ChunkSizeSetsHowManyValuesShareAScale) {
  const std::vector<float> v = Random(1000, 5);
  CodecOptions o;
  o.kind = CodecKind::kOneBit;
  o.chunk = 64;
  const Encoded e = Encode(o, v);
  // 16 scales (the last chunk 40 values), then 1000 sign bits in 4-byte words.
  EXPECT_EQ(int64_t(e.payload.size()), 4 * 16 + 128);
  EXPECT_EQ(FixedPayloadBytes(o, 1000), int64_t(e.payload.size()));
  for (int64_t c = 0; c < 16; ++c) {
    const int64_t begin = 64 * c, end = std::min<int64_t>(1000, begin + 64);
    double mean = 0;
    for (int64_t i = begin; i < end; ++i) mean += std::fabs(v[size_t(i)]);
    mean /= double(end - begin);
    for (int64_t i = begin; i < end; ++i)
      EXPECT_FLOAT_EQ(std::fabs(e.decoded[size_t(i)]), float(mean)) << i;
  }
  ExpectReceiversDecodeTheSame(o, e);
  o.kind = CodecKind::kTwoBit;  // 2-bit: the largest magnitude per chunk
  const Encoded two = Encode(o, v);
  EXPECT_EQ(int64_t(two.payload.size()), 4 * 16 + 252);
  ExpectReceiversDecodeTheSame(o, two);
}

TEST(GradCodec, TwoBitRoundsToTheNearestOfFourLevels) {
  CodecOptions o;
  o.kind = CodecKind::kTwoBit;
  const std::vector<float> v = {3.0f, -3.0f, 0.9f, 1.1f, -0.2f, 2.1f, 0.0f};
  const Encoded e = Encode(o, v);
  const std::vector<float> want = {3.0f, -3.0f, 1.0f, 1.0f, -1.0f, 3.0f, 1.0f};
  for (size_t i = 0; i < v.size(); ++i) EXPECT_FLOAT_EQ(e.decoded[i], want[i]) << i;
  ExpectReceiversDecodeTheSame(o, e);
  const Encoded zeros = Encode(o, std::vector<float>(10, 0.0f));
  for (float d : zeros.decoded) EXPECT_EQ(d, 0.0f);
}

// With error feedback (send value + residual, keep value + residual -
// decoded), what arrives over T steps equals T x the gradient up to one
// residual: nothing is lost, only delayed.
TEST(GradCodec, ErrorFeedbackDeliversAConstantGradientInFull) {
  const std::vector<float> g = Random(5000, 3);
  for (CodecKind kind : {CodecKind::kTopK, CodecKind::kOneBit, CodecKind::kTwoBit}) {
    CodecOptions o;
    o.kind = kind;
    o.topk_ratio = 0.05;
    std::vector<float> residual(g.size(), 0.0f), arrived(g.size(), 0.0f), value(g.size());
    const int steps = 200;
    for (int t = 0; t < steps; ++t) {
      for (size_t i = 0; i < g.size(); ++i) value[i] = g[i] + residual[i];
      const Encoded e = Encode(o, value);
      for (size_t i = 0; i < g.size(); ++i) {
        residual[i] = value[i] - e.decoded[i];
        arrived[i] += e.decoded[i];
      }
    }
    double err = 0, norm = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_NEAR(arrived[i] + residual[i], steps * g[i], 1e-3 * steps) << CodecName(kind);
      err += std::pow(arrived[i] / steps - g[i], 2);
      norm += std::pow(g[i], 2);
    }
    EXPECT_LT(std::sqrt(err / norm), 0.25) << CodecName(kind);
  }
}

TEST(GradCodec, NotANumberTravelsSoTheLossScalerSeesIt) {
  std::vector<float> v = Random(300, 4);
  v[17] = std::nanf("");
  for (CodecKind kind : {CodecKind::kTopK, CodecKind::kOneBit, CodecKind::kTwoBit}) {
    CodecOptions o;
    o.kind = kind;
    const Encoded e = Encode(o, v);
    std::vector<float> sum(v.size(), 0.0f);
    ASSERT_TRUE(
        DecodeAddGradient(o, e.payload.data(), int64_t(e.payload.size()), 300, sum.data()).ok());
    EXPECT_TRUE(std::isnan(sum[17])) << CodecName(kind);
  }
}

TEST(GradCodec, ACorruptPayloadIsNamed) {
  const std::vector<float> v = Random(1000, 5);
  std::vector<float> sum(v.size(), 0.0f);
  for (bool huffman : {false, true}) {
    CodecOptions o;
    o.huffman = huffman;
    Encoded e = Encode(o, v);
    const Status truncated =
        DecodeAddGradient(o, e.payload.data(), int64_t(e.payload.size()) - 8, 1000, sum.data());
    EXPECT_FALSE(truncated.ok());
    EXPECT_NE(truncated.message().find("does not decode"), std::string::npos);
    EXPECT_NE(truncated.message().find("gradient_compression"), std::string::npos);
  }
  CodecOptions o;
  o.kind = CodecKind::kOneBit;
  Encoded e = Encode(o, v);
  EXPECT_FALSE(
      DecodeAddGradient(o, e.payload.data(), int64_t(e.payload.size()), 900, sum.data()).ok());
}

}  // namespace
}  // namespace dst
