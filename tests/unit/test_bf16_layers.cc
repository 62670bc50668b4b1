// The bf16 compute forms that round an operand once and multiply it several
// times (GemmBf16 with bf16 operands, linear_bf16.cc, attention_bf16.cc)
// against what they replace: every GEMM rounding its own fp32 operands
// (Gemm with ComputeType::kBf16). Same values rounded the same way into the
// same primitives: the same bits. And the 16-lane rounding against the
// scalar FloatToBFloat16 on the values where rounding is delicate.
#include <gtest/gtest.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/cpu/activations.h"
#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/gemm.h"
#include "core/kernels/cpu/layernorm.h"
#include "core/kernels/cpu/linear.h"
#include "core/precision/convert.h"

namespace dst::cpu {
namespace {

bool NoBf16Matmul() {
  return dnnl_get_effective_cpu_isa() < dnnl_cpu_isa_avx512_core;
}

std::vector<float> Normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (float &v : x) v = normal(rng);
  return x;
}

void ExpectSameBits(const std::vector<float> &got, const std::vector<float> &want,
                    const char *what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << what << " differs at " << i << ": " << got[i] << " vs " << want[i];
}

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

TEST(Bf16Layers, RoundingSixteenLanesIsTheScalarRounding) {
  // Ties both ways, the largest finite values (rounding up to infinity),
  // infinities, signalling and quiet NaNs, subnormals, zeros, and noise;
  // row lengths that leave a remainder after 16 lanes and a row stride.
  std::vector<float> x = {FromBits(0x3F808000u),
                          FromBits(0x3F818000u),
                          FromBits(0x7F7FFFFFu),
                          FromBits(0xFF7FFFFFu),
                          FromBits(0x7F800000u),
                          FromBits(0xFF800000u),
                          FromBits(0x7F800001u),
                          FromBits(0xFFC00001u),
                          FromBits(0x00000001u),
                          FromBits(0x807FFFFFu),
                          FromBits(0x007F8000u),
                          0.0f,
                          -0.0f};
  for (float v : Normal(1000, 3, 1e3f)) x.push_back(v);
  const int64_t cols = 37, ld = 41, rows = int64_t(x.size()) / ld;
  std::vector<uint16_t> rounded;
  RoundToBf16(x.data(), rows, cols, ld, rounded);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(rounded[size_t(r * cols + c)], FloatToBFloat16(x[size_t(r * ld + c)]))
          << "row " << r << " col " << c;
  std::vector<uint16_t> row(x.size());
  RoundRowToBf16(x.data(), row.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(row[i], FloatToBFloat16(x[i])) << i;
}

TEST(Bf16Layers, Bf16OperandsGiveTheBitsOfRoundingInTheGemm) {
  if (NoBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int m = 40, n = 24, k = 56;
      const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
      const std::vector<float> a = Normal(size_t(a_rows * a_cols), 5),
                               b = Normal(size_t(b_rows * b_cols), 6);
      std::vector<uint16_t> a16, b16;
      RoundToBf16(a.data(), a_rows, a_cols, a_cols, a16);
      RoundToBf16(b.data(), b_rows, b_cols, b_cols, b16);
      const std::vector<float> c0 = Normal(size_t(m * n), 7);
      std::vector<float> want = c0, both = c0, mixed = c0;
      Gemm(ComputeType::kBf16, ta, tb, m, n, k, 0.5f, a.data(), a_cols, b.data(), b_cols, 1.0f,
           want.data(), n);
      GemmBf16(ta, tb, m, n, k, 0.5f, Bf16Operand(a16.data(), a_cols),
               Bf16Operand(b16.data(), b_cols), 1.0f, both.data(), n);
      GemmBf16(ta, tb, m, n, k, 0.5f, Fp32Operand(a.data(), a_cols),
               Bf16Operand(b16.data(), b_cols), 1.0f, mixed.data(), n);
      ExpectSameBits(both, want, "bf16 operands");
      ExpectSameBits(mixed, want, "one fp32, one bf16 operand");
    }
}

// linear.h's backward as it was: each GEMM rounds its own operands.
void LinearBackwardPerGemm(const std::vector<float> &dy, const std::vector<float> &x,
                           const std::vector<float> &w, int rows, int in, int out,
                           std::vector<float> &dx, std::vector<float> &dw, std::vector<float> &db) {
  Gemm(ComputeType::kBf16, false, false, rows, in, out, 1.0f, dy.data(), out, w.data(), in, 0.0f,
       dx.data(), in);
  Gemm(ComputeType::kBf16, true, false, out, in, rows, 1.0f, dy.data(), out, x.data(), in, 1.0f,
       dw.data(), in);
  AddColumnSums(dy.data(), rows, out, db.data());
}

// The bias gradient's order: fixed blocks of kSumRows rows, each summed in
// row order from zero, then the blocks added in order; the same bits on one
// thread or three.
TEST(Bf16Layers, ColumnSumsAddFixedRowBlocksWhateverTheThreads) {
  const int64_t rows = 2 * kSumRows + 22, out = 40;
  const std::vector<float> dy = Normal(size_t(rows * out), 31, 3.0f);
  std::vector<float> want = Normal(size_t(out), 32);
  for (int64_t b0 = 0; b0 < rows; b0 += kSumRows) {
    std::vector<float> block(size_t(out), 0.0f);
    for (int64_t r = b0; r < std::min(rows, b0 + kSumRows); ++r)
      for (int64_t j = 0; j < out; ++j) block[size_t(j)] += dy[size_t(r * out + j)];
    for (int64_t j = 0; j < out; ++j) want[size_t(j)] += block[size_t(j)];
  }
  const int saved = omp_get_max_threads();
  for (const int threads : {1, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> got = Normal(size_t(out), 32);
    AddColumnSums(dy.data(), rows, out, got.data());
    ExpectSameBits(got, want, threads == 1 ? "one thread" : "three threads");
  }
  omp_set_num_threads(saved);
}

TEST(Bf16Layers, LinearBackwardRoundsTheGradientOnceWithTheSameBits) {
  if (NoBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  const int rows = int(kSumRows) + 20, in = 40, out = 72;  // two blocks of the bias sum's rows
  const std::vector<float> dy = Normal(size_t(rows * out), 21), x = Normal(size_t(rows * in), 22),
                           w = Normal(size_t(out * in), 23);
  std::vector<float> dx(size_t(rows * in)), dw = Normal(size_t(out * in), 24),
                                            db = Normal(size_t(out), 25);
  std::vector<float> want_dx = dx, want_dw = dw, want_db = db;
  LinearBackwardPerGemm(dy, x, w, rows, in, out, want_dx, want_dw, want_db);
  LinearBackward(dy.data(), x.data(), w.data(), rows, in, out, dx.data(), dw.data(), db.data(),
                 ComputeType::kBf16);
  ExpectSameBits(dx, want_dx, "dx");
  ExpectSameBits(dw, want_dw, "dweight");
  ExpectSameBits(db, want_db, "dbias");
  // The weight half alone (zero-bubble schedules) too.
  std::vector<float> dw2 = Normal(size_t(out * in), 24), db2 = Normal(size_t(out), 25);
  LinearWeightBackward(dy.data(), x.data(), rows, in, out, dw2.data(), db2.data(),
                       ComputeType::kBf16);
  ExpectSameBits(dw2, want_dw, "dweight (weight half)");
  ExpectSameBits(db2, want_db, "dbias (weight half)");
  // Given x's bf16 copy (the activation stash), the same bits.
  std::vector<uint16_t> x16;
  RoundToBf16(x.data(), rows, in, in, x16);
  std::vector<float> dx3(dx.size()), dw3 = Normal(size_t(out * in), 24),
                                     db3 = Normal(size_t(out), 25);
  LinearBackward(dy.data(), x.data(), w.data(), rows, in, out, dx3.data(), dw3.data(), db3.data(),
                 ComputeType::kBf16, x16.data());
  ExpectSameBits(dw3, want_dw, "dweight (x's bf16 copy)");
  std::vector<float> dw4 = Normal(size_t(out * in), 24), db4 = Normal(size_t(out), 25);
  LinearWeightBackward(dy.data(), x.data(), rows, in, out, dw4.data(), db4.data(),
                       ComputeType::kBf16, x16.data());
  ExpectSameBits(dw4, want_dw, "dweight (weight half, x's bf16 copy)");
}

TEST(Bf16Layers, LinearForwardAddsTheBiasInTheGemmWithTheSameBits) {
  if (NoBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  const int rows = 48, in = 40, out = 72;
  const std::vector<float> x = Normal(size_t(rows * in), 41), w = Normal(size_t(out * in), 42),
                           bias = Normal(size_t(out), 43);
  // As it was: the bias copied into every row, then the product added (beta 1).
  std::vector<float> want(size_t(rows * out));
  for (int r = 0; r < rows; ++r) std::copy(bias.begin(), bias.end(), want.begin() + r * out);
  Gemm(ComputeType::kBf16, false, true, rows, out, in, 1.0f, x.data(), in, w.data(), in, 1.0f,
       want.data(), out);
  std::vector<float> y(want.size());
  LinearForward(x.data(), w.data(), bias.data(), rows, in, out, y.data(), ComputeType::kBf16);
  ExpectSameBits(y, want, "y");
}

// attention.h's kernels as they were: each GEMM rounds its own operands
// (grouped-query heads adding into their key/value head's gradient in order;
// ALiBi added to the scores).
void AttentionPerGemm(const std::vector<float> &dy, const std::vector<float> &qkv,
                      const AttentionShape &s, std::vector<float> &att, std::vector<float> &y,
                      std::vector<float> &dqkv) {
  const int64_t hs = s.head_size(), W = s.width(), T = s.T;
  const float scale = 1.0f / std::sqrt(float(hs));
  std::vector<float> ds(size_t(T * T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t g = s.group(h);
      const float *row = qkv.data() + b * T * W;
      const float *q = row + s.q_offset(h), *k = row + s.k_offset(g), *v = row + s.v_offset(g);
      float *a = att.data() + (b * s.H + h) * T * T;
      Gemm(ComputeType::kBf16, false, true, int(T), int(T), int(hs), scale, q, int(W), k, int(W),
           0.0f, a, int(T));
      for (int64_t t = 0; t < T; ++t) {
        AddAlibiRow(a + t * T, t, AlibiSlopeOf(s, h));
        CausalSoftmaxRow(a + t * T, t, T);
      }
      Gemm(ComputeType::kBf16, false, false, int(T), int(hs), int(T), 1.0f, a, int(T), v, int(W),
           0.0f, y.data() + b * T * s.C + h * hs, int(s.C));
    }
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t g = s.group(h);
      const float acc = h % s.group_size() == 0 ? 0.0f : 1.0f;
      const float *row = qkv.data() + b * T * W;
      const float *q = row + s.q_offset(h), *k = row + s.k_offset(g), *v = row + s.v_offset(g);
      const float *a = att.data() + (b * s.H + h) * T * T;
      const float *gy = dy.data() + b * T * s.C + h * hs;
      float *drow = dqkv.data() + b * T * W;
      float *dq = drow + s.q_offset(h), *dk = drow + s.k_offset(g), *dv = drow + s.v_offset(g);
      Gemm(ComputeType::kBf16, false, true, int(T), int(T), int(hs), 1.0f, gy, int(s.C), v, int(W),
           0.0f, ds.data(), int(T));
      Gemm(ComputeType::kBf16, true, false, int(T), int(hs), int(T), 1.0f, a, int(T), gy, int(s.C),
           acc, dv, int(W));
      for (int64_t t = 0; t < T; ++t) CausalSoftmaxBackwardRow(a + t * T, ds.data() + t * T, t, T);
      Gemm(ComputeType::kBf16, false, false, int(T), int(hs), int(T), scale, ds.data(), int(T), k,
           int(W), 0.0f, dq, int(W));
      Gemm(ComputeType::kBf16, true, false, int(T), int(hs), int(T), scale, ds.data(), int(T), q,
           int(W), acc, dk, int(W));
    }
}

void CheckAttentionBf16(const AttentionShape &s) {
  const std::vector<float> qkv = Normal(size_t(s.B * s.T * s.width()), 31),
                           dy = Normal(size_t(s.B * s.T * s.C), 32);
  std::vector<float> att(size_t(s.B * s.H * s.T * s.T)), y(size_t(s.B * s.T * s.C)),
      dqkv(qkv.size());
  std::vector<float> want_att = att, want_y = y, want_dqkv = dqkv;
  AttentionPerGemm(dy, qkv, s, want_att, want_y, want_dqkv);
  AttentionForward(qkv.data(), s, att.data(), y.data(), ComputeType::kBf16);
  std::vector<float> scratch(size_t(omp_get_max_threads() * s.T * s.T));
  AttentionBackward(dy.data(), qkv.data(), att.data(), s, dqkv.data(), scratch.data(),
                    ComputeType::kBf16);
  ExpectSameBits(att, want_att, "probabilities");
  ExpectSameBits(y, want_y, "output");
  ExpectSameBits(dqkv, want_dqkv, "dqkv");
  // The forward writing its bf16 copies into a caller's buffers (the
  // activation stash): qkv and the probabilities rounded, masked entries +0,
  // the same fp32 outputs.
  std::vector<uint16_t> qkv16(qkv.size()), att16(att.size(), 0xFFFF);
  std::vector<float> att2(att.size()), y2(y.size());
  AttentionForward(qkv.data(), s, att2.data(), y2.data(), ComputeType::kBf16, qkv16.data(),
                   att16.data());
  ExpectSameBits(att2, want_att, "probabilities (copies written)");
  ExpectSameBits(y2, want_y, "output (copies written)");
  for (size_t i = 0; i < qkv.size(); ++i) ASSERT_EQ(qkv16[i], FloatToBFloat16(qkv[i])) << i;
  for (int64_t bh = 0; bh < s.B * s.H; ++bh)  // up to the end of each row's block
    for (int64_t r = 0; r < s.T; ++r)
      for (int64_t j = 0; j < std::min(s.T, (r / kCausalBlock + 1) * kCausalBlock); ++j) {
        const size_t i = size_t((bh * s.T + r) * s.T + j);
        ASSERT_EQ(att16[i], FloatToBFloat16(att[i])) << "row " << r << " col " << j;
      }
  // Only the bf16 probabilities kept (att null: the scores pass through a
  // thread's scratch): the same output and the same copies.
  std::vector<uint16_t> qkv16b(qkv.size()), att16b(att.size(), 0xFFFF);
  std::vector<float> y3(y.size());
  AttentionForward(qkv.data(), s, static_cast<float *>(nullptr), y3.data(), ComputeType::kBf16,
                   qkv16b.data(), att16b.data());
  ExpectSameBits(y3, want_y, "output (bf16 probabilities only)");
  EXPECT_EQ(qkv16b, qkv16);
  EXPECT_EQ(att16b, att16);
  // Given those copies, the backward reads them and neither fp32 tensor (the
  // store does not widen them back): the bits of the per-GEMM backward on the
  // probabilities as the 16-bit stash keeps them (rounded).
  std::vector<float> rounded_att(att.size()), want_dqkv2(dqkv.size());
  for (size_t i = 0; i < att.size(); ++i) rounded_att[i] = BFloat16ToFloat(FloatToBFloat16(att[i]));
  AttentionBackward(dy.data(), qkv.data(), rounded_att.data(), s, want_dqkv2.data(), scratch.data(),
                    ComputeType::kBf16);
  const std::vector<float> nan_qkv(qkv.size(), std::numeric_limits<float>::quiet_NaN()),
      nan_att(att.size(), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> dqkv2(dqkv.size());
  AttentionBackward(dy.data(), nan_qkv.data(), nan_att.data(), s, dqkv2.data(), scratch.data(),
                    ComputeType::kBf16, qkv16.data(), att16.data());
  ExpectSameBits(dqkv2, want_dqkv2, "dqkv (bf16 copies given, fp32 ones not read)");
}

// One block and, at T = 160, two of them (kCausalBlock = 128: the backward's
// GEMMs skip the masked block; a ragged second block) against the whole
// per-GEMM products.
TEST(Bf16Layers, AttentionRoundsEachOperandOnceWithTheSameBits) {
  if (NoBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  for (const AttentionShape &s : {AttentionShape{2, 24, 32, 4}, AttentionShape{1, 160, 32, 2}}) {
    SCOPED_TRACE("T = " + std::to_string(s.T));
    CheckAttentionBf16(s);
  }
}

// The LLaMA and BLOOM layouts: grouped-query heads (two query heads per
// key/value head, and multi-query), BLOOM's interleaved qkv with ALiBi.
TEST(Bf16Layers, GroupedQueryInterleavedAndAlibiAttentionKeepTheSameBits) {
  if (NoBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  AttentionShape gqa{2, 24, 64, 4}, mqa{1, 160, 32, 2}, bloom{2, 24, 48, 3};
  gqa.kv_heads = 2;
  mqa.kv_heads = 1;
  bloom.interleaved = true;
  bloom.alibi_heads = 6;
  bloom.first_head = 3;
  for (const AttentionShape &s : {gqa, mqa, bloom}) {
    SCOPED_TRACE("kv " + std::to_string(s.kv()) + ", T = " + std::to_string(s.T));
    CheckAttentionBf16(s);
  }
}

TEST(Bf16Layers, LinearForwardWritesItsInputsBf16CopyWithTheSameBits) {
  if (NoBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  const int rows = 48, in = 40, out = 72;
  const std::vector<float> x = Normal(size_t(rows * in), 51), w = Normal(size_t(out * in), 52),
                           bias = Normal(size_t(out), 53);
  for (const float *b : {bias.data(), static_cast<const float *>(nullptr)}) {
    std::vector<float> want(size_t(rows * out)), y(want.size());
    LinearForward(x.data(), w.data(), b, rows, in, out, want.data(), ComputeType::kBf16);
    std::vector<uint16_t> x16(x.size());
    LinearForward(x.data(), w.data(), b, rows, in, out, y.data(), ComputeType::kBf16, x16.data());
    ExpectSameBits(y, want, b ? "y (bias)" : "y (no bias)");
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x16[i], FloatToBFloat16(x[i])) << i;
    // x null: the GEMM reads the copy its producer wrote.
    std::vector<float> y2(want.size());
    LinearForward(static_cast<const float *>(nullptr), w.data(), b, rows, in, out, y2.data(),
                  ComputeType::kBf16, x16.data());
    ExpectSameBits(y2, want, b ? "y from x16 (bias)" : "y from x16 (no bias)");
  }
}

// A weight's bf16 copy (ParamStore::param16: the 16-bit parameter staging)
// is the operand the forward's and the input gradient's GEMMs read, not the
// fp32 weight rounded again: given a copy of other values w2, every form
// gives the bits of the fp32 weight float(bf16(w2)) without a copy.
TEST(Bf16Layers, LinearReadsTheWeightsBf16CopyInsteadOfRoundingTheWeight) {
  if (NoBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  const int rows = 48, in = 40, out = 64;
  const std::vector<float> x = Normal(size_t(rows * in), 54), w = Normal(size_t(out * in), 55),
                           w2 = Normal(size_t(out * in), 56), bias = Normal(size_t(out), 57),
                           dy = Normal(size_t(rows * out), 58), gx = Normal(size_t(rows * out), 59);
  std::vector<uint16_t> w16, x16, gx16;
  RoundToBf16(w2.data(), out, in, in, w16);
  RoundToBf16(x.data(), rows, in, in, x16);
  RoundToBf16(gx.data(), rows, out, out, gx16);
  std::vector<float> w2_grid(w2.size());
  BFloat16ToFloat(w16.data(), w2_grid.data(), int64_t(w2.size()));
  for (const float *b : {bias.data(), static_cast<const float *>(nullptr)}) {
    std::vector<float> want(size_t(rows * out)), y(want.size());
    LinearForward(x.data(), w2_grid.data(), b, rows, in, out, want.data(), ComputeType::kBf16);
    LinearForward(x.data(), w.data(), b, rows, in, out, y.data(), ComputeType::kBf16, nullptr,
                  w16.data());
    ExpectSameBits(y, want, b ? "y (bias)" : "y (no bias)");
  }
  std::vector<float> want_dx(x.size()), dx(x.size());
  LinearBackward(dy.data(), x.data(), w2_grid.data(), rows, in, out, want_dx.data(),
                 static_cast<float *>(nullptr), static_cast<float *>(nullptr), ComputeType::kBf16);
  LinearBackward(dy.data(), x.data(), w.data(), rows, in, out, dx.data(),
                 static_cast<float *>(nullptr), static_cast<float *>(nullptr), ComputeType::kBf16,
                 nullptr, w16.data());
  ExpectSameBits(dx, want_dx, "dx");
  GeluLinearBackwardBf16(dy.data(), gx16.data(), nullptr, x16.data(), w2_grid.data(), nullptr, rows,
                         in, out, want_dx.data(), nullptr, nullptr);
  GeluLinearBackwardBf16(dy.data(), gx16.data(), nullptr, x16.data(), w.data(), w16.data(), rows,
                         in, out, dx.data(), nullptr, nullptr);
  ExpectSameBits(dx, want_dx, "dx through the GELU");
}

// LayerNorm and GELU writing their outputs' bf16 copies (as the output is
// written, or alone): the fp32 outputs' bits, rounded. GELU over two whole
// element blocks and a ragged one; LayerNorm over rows of a width that is no
// multiple of 16 (RoundRowToBf16's masked tail).
TEST(Bf16Layers, LayerNormAndGeluWriteTheirOutputsBf16CopiesWithTheSameBits) {
  const int64_t n = 2 * kElementBlock + 77;
  const std::vector<float> x = Normal(size_t(n), 61, 3.0f);
  std::vector<float> want(x.size()), out(x.size());
  GeluForward(x.data(), n, want.data());
  for (float *o : {out.data(), static_cast<float *>(nullptr)}) {
    std::vector<uint16_t> out16(x.size(), 0xFFFF);
    GeluForward(x.data(), n, o, out16.data());
    if (o != nullptr) ExpectSameBits(out, want, "GELU output (copy written too)");
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(out16[i], FloatToBFloat16(want[i])) << (o ? "with out, " : "copy only, ") << i;
  }
  const int64_t rows = 37, C = 50;
  const std::vector<float> w = Normal(size_t(C), 62), b = Normal(size_t(C), 63);
  std::vector<float> ln_want(size_t{rows * C}), mean_want(size_t{rows}), rstd_want(size_t{rows});
  LayerNormForward(x.data(), w.data(), b.data(), rows, C, ln_want.data(), mean_want.data(),
                   rstd_want.data());
  for (bool with_out : {true, false}) {
    std::vector<float> ln(ln_want.size()), mean(size_t{rows}), rstd(size_t{rows});
    std::vector<uint16_t> ln16(ln.size(), 0xFFFF);
    LayerNormForward(x.data(), w.data(), b.data(), rows, C, with_out ? ln.data() : nullptr,
                     mean.data(), rstd.data(), ln16.data());
    if (with_out) ExpectSameBits(ln, ln_want, "LayerNorm output (copy written too)");
    ExpectSameBits(mean, mean_want, "mean");
    ExpectSameBits(rstd, rstd_want, "rstd");
    for (size_t i = 0; i < ln.size(); ++i)
      ASSERT_EQ(ln16[i], FloatToBFloat16(ln_want[i]))
          << (with_out ? "with out, " : "copy only, ") << i;
  }
}

// GELU keeping its input for the backward in bf16 alone: the forward writes
// x's rounding (with or without its output's copy), and the backward reading
// that copy gives the bits of the backward over the rounded fp32 input (what
// the store's stash-and-widen gave back before).
TEST(Bf16Layers, GeluKeepsItsInputInBf16AndItsBackwardReadsItWithTheSameBits) {
  const int64_t n = 2 * kElementBlock + 45;
  const std::vector<float> x = Normal(size_t(n), 64, 3.0f), dy = Normal(size_t(n), 65);
  std::vector<float> want(x.size()), out(x.size());
  GeluForward(x.data(), n, want.data());
  for (bool with_out16 : {true, false}) {
    std::vector<uint16_t> x16(x.size(), 0xFFFF), out16(x.size(), 0xFFFF);
    GeluForward(x.data(), n, out.data(), with_out16 ? out16.data() : nullptr, x16.data());
    ExpectSameBits(out, want, "GELU output");
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(x16[i], FloatToBFloat16(x[i])) << i;
      if (with_out16) {
        ASSERT_EQ(out16[i], FloatToBFloat16(want[i])) << i;
      }
    }
  }
  std::vector<uint16_t> x16(x.size());
  std::vector<float> rounded(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x16[i] = FloatToBFloat16(x[i]);
    rounded[i] = BFloat16ToFloat(x16[i]);
  }
  std::vector<float> dx_want(x.size()), dx(dy);
  GeluBackward(dy.data(), rounded.data(), n, dx_want.data());
  GeluBackward(dx.data(), static_cast<const float *>(nullptr), x16.data(), n, dx.data());
  ExpectSameBits(dx, dx_want, "GELU input gradient from the bf16 input (in place)");
}

// The MLP's GELU backward feeding c_fc's backward in one pass (the GELU's
// gradient rounded as it is computed, never written in fp32): the bits of
// GeluBackward from the rounded GELU input, then LinearBackward, where the
// width is a multiple of 16; otherwise each row's last values take GELU's
// scalar loop, equal to fp32 roundoff. Also without the weight gradients.
TEST(Bf16Layers, GeluLinearBackwardIsTheGeluBackwardThenTheLinearBackward) {
  if (NoBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  for (const int out : {96, 40}) {
    SCOPED_TRACE("out " + std::to_string(out));
    const int rows = int(kSumRows) + 37, in = 24;
    const std::vector<float> dout = Normal(size_t(rows * out), 81),
                             gx = Normal(size_t(rows * out), 82, 3.0f),
                             x = Normal(size_t(rows * in), 83), w = Normal(size_t(out * in), 84);
    std::vector<uint16_t> gx16, x16;
    RoundToBf16(gx.data(), rows, out, out, gx16);
    RoundToBf16(x.data(), rows, in, in, x16);
    std::vector<float> gx_rounded(gx.size()), dy(gx.size());
    BFloat16ToFloat(gx16.data(), gx_rounded.data(), int64_t(gx.size()));
    GeluBackward(dout.data(), gx_rounded.data(), int64_t(dy.size()), dy.data());
    std::vector<float> want_dx(size_t(rows * in)), want_dw = Normal(size_t(out * in), 85),
                                                   want_db = Normal(size_t(out), 86);
    std::vector<float> dx(want_dx.size()), dw = want_dw, db = want_db;
    LinearBackward(dy.data(), x.data(), w.data(), rows, in, out, want_dx.data(), want_dw.data(),
                   want_db.data(), ComputeType::kBf16, x16.data());
    const std::vector<float> dout_before = dout;
    GeluLinearBackwardBf16(dout.data(), gx16.data(), nullptr, x16.data(), w.data(), nullptr, rows,
                           in, out, dx.data(), dw.data(), db.data());
    ExpectSameBits(dout, dout_before, "dout (only read)");
    if (out % 16 == 0) {
      ExpectSameBits(dx, want_dx, "dx");
      ExpectSameBits(dw, want_dw, "dweight");
      ExpectSameBits(db, want_db, "dbias");
    } else {
      for (size_t i = 0; i < db.size(); ++i) EXPECT_NEAR(db[i], want_db[i], 1e-4f) << i;
      for (size_t i = 0; i < dx.size(); ++i)
        EXPECT_NEAR(dx[i], want_dx[i], 2e-2f * (1.0f + std::fabs(want_dx[i]))) << i;
    }
    std::vector<float> dx_only(dx.size()), db_untouched = Normal(size_t(out), 86);
    GeluLinearBackwardBf16(dout.data(), gx16.data(), nullptr, x16.data(), w.data(), nullptr, rows,
                           in, out, dx_only.data(), nullptr, db_untouched.data());
    ExpectSameBits(dx_only, dx, "dx without the weight gradients");
    ExpectSameBits(db_untouched, Normal(size_t(out), 86), "dbias (not summed without dweight)");
  }
}

// The second LayerNorm reading its residual sum in the same pass: the sum
// and every output the bits of Add, then LayerNormForward (fp32 output, its
// bf16 copy alongside, or the copy alone).
TEST(Bf16Layers, AddLayerNormIsTheAddThenTheLayerNormBitForBit) {
  const int64_t rows = 29, C = 70;
  const std::vector<float> a = Normal(size_t(rows * C), 71, 2.0f),
                           b = Normal(size_t(rows * C), 72, 0.5f), w = Normal(size_t(C), 73),
                           bias = Normal(size_t(C), 74);
  std::vector<float> res_want(a.size()), want(a.size()), mean_want(size_t{rows}),
      rstd_want(size_t{rows});
  Add(a.data(), b.data(), rows * C, res_want.data());
  LayerNormForward(res_want.data(), w.data(), bias.data(), rows, C, want.data(), mean_want.data(),
                   rstd_want.data());
  for (int form = 0; form < 3; ++form) {  // fp32 only, fp32 and the copy, the copy alone
    SCOPED_TRACE("form " + std::to_string(form));
    std::vector<float> res(a.size()), out(a.size()), mean(size_t{rows}), rstd(size_t{rows});
    std::vector<uint16_t> out16(a.size(), 0xFFFF);
    AddLayerNormForward(a.data(), b.data(), res.data(), w.data(), bias.data(), rows, C,
                        form < 2 ? out.data() : nullptr, mean.data(), rstd.data(),
                        form > 0 ? out16.data() : nullptr);
    ExpectSameBits(res, res_want, "residual sum");
    if (form < 2) ExpectSameBits(out, want, "output");
    ExpectSameBits(mean, mean_want, "mean");
    ExpectSameBits(rstd, rstd_want, "rstd");
    if (form > 0) {
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(out16[i], FloatToBFloat16(want[i])) << i;
    }
  }
}

}  // namespace
}  // namespace dst::cpu
