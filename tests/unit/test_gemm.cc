// The GEMM backends (oneDNN, OpenBLAS) against an fp64 reference, and bf16
// compute (ComputeType::kBf16) against the fp64 product of bf16-rounded
// operands, over transposes, alpha/beta and row strides wider than a row.
#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.h>

#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/kernels/cpu/gemm.h"
#include "core/precision/convert.h"

namespace dst::cpu {
namespace {

struct Case {
  int m, n, k;
  bool trans_a, trans_b;
  float alpha, beta;
  int pad;  // extra elements per stored row (lda, ldb, ldc beyond the width)
};

struct Operands {
  int lda, ldb, ldc;
  std::vector<float> a, b, c;
};

Operands Make(const Case &t, std::mt19937 &rng) {
  std::normal_distribution<float> normal;
  Operands o;
  const int a_rows = t.trans_a ? t.k : t.m, a_cols = t.trans_a ? t.m : t.k;
  const int b_rows = t.trans_b ? t.n : t.k, b_cols = t.trans_b ? t.k : t.n;
  o.lda = a_cols + t.pad;
  o.ldb = b_cols + t.pad;
  o.ldc = t.n + t.pad;
  o.a.resize(size_t(a_rows) * o.lda);
  o.b.resize(size_t(b_rows) * o.ldb);
  o.c.resize(size_t(t.m) * o.ldc);
  for (float &x : o.a) x = normal(rng);
  for (float &x : o.b) x = normal(rng);
  for (float &x : o.c) x = normal(rng);
  return o;
}

float RoundBf16(float x) {
  return BFloat16ToFloat(FloatToBFloat16(x));
}

// alpha * op(A) op(B) + beta * C in fp64; `bf16` rounds A and B first.
std::vector<double> Reference(const Case &t, const Operands &o, bool bf16) {
  auto at = [&](const std::vector<float> &x, int ld, bool trans, int r, int c) {
    const float v = trans ? x[size_t(c) * ld + r] : x[size_t(r) * ld + c];
    return double(bf16 ? RoundBf16(v) : v);
  };
  std::vector<double> out(o.c.size());
  for (int i = 0; i < t.m; ++i)
    for (int j = 0; j < t.n; ++j) {
      double sum = 0;
      for (int p = 0; p < t.k; ++p)
        sum += at(o.a, o.lda, t.trans_a, i, p) * at(o.b, o.ldb, t.trans_b, p, j);
      out[size_t(i) * o.ldc + j] = t.alpha * sum + t.beta * o.c[size_t(i) * o.ldc + j];
    }
  return out;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back({37, 29, 53, ta, tb, 1.0f, 0.0f, 0});
      cases.push_back({64, 48, 32, ta, tb, 0.125f, 1.0f, 3});  // attention's scale, dW's +=
      cases.push_back({5, 70, 1, ta, tb, 1.0f, 0.5f, 1});
    }
  return cases;
}

// |got - want| within tol * (|alpha| * sum of |products| + |beta c|): the
// error bound of an fp32 accumulation.
void ExpectClose(const Case &t, const Operands &o, const std::vector<float> &got,
                 const std::vector<double> &want, double tol) {
  for (int i = 0; i < t.m; ++i)
    for (int j = 0; j < t.n; ++j) {
      const size_t at = size_t(i) * o.ldc + j;
      const double scale = std::sqrt(double(t.k)) * std::fabs(t.alpha) + std::fabs(t.beta) * 3 + 1;
      ASSERT_NEAR(got[at], want[at], tol * scale)
          << "m=" << t.m << " n=" << t.n << " k=" << t.k << " ta=" << t.trans_a
          << " tb=" << t.trans_b << " at (" << i << "," << j << ")";
    }
}

TEST(Gemm, BothBackendsMatchTheFp64Product) {
  std::mt19937 rng(7);
  for (const Case &t : Cases())
    for (GemmBackend backend : {GemmBackend::kOneDnn, GemmBackend::kOpenBlas}) {
      Operands o = Make(t, rng);
      const std::vector<double> want = Reference(t, o, false);
      std::vector<float> c = o.c;
      GemmWith(backend, t.trans_a, t.trans_b, t.m, t.n, t.k, t.alpha, o.a.data(), o.lda, o.b.data(),
               o.ldb, t.beta, c.data(), o.ldc);
      ExpectClose(t, o, c, want, 2e-5);
      for (int i = 0; i < t.m; ++i)  // the padding past each row of C is untouched
        for (int j = t.n; j < o.ldc; ++j)
          ASSERT_EQ(c[size_t(i) * o.ldc + j], o.c[size_t(i) * o.ldc + j]);
    }
}

// X W^T with few columns and a long reduction runs split by rows over the
// threads (gemm.cc's RowSplitThreads): on 2 and 3 threads, rows not a
// multiple of the blocks, beta accumulating, row strides wider than a row —
// the fp64 product, and the padding untouched.
TEST(Gemm, RowSplitProjectionsMatchTheFp64Product) {
  std::mt19937 rng(11);
  const int before = omp_get_max_threads();
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    for (const Case &t : {Case{203, 24, 96, false, true, 1.0f, 0.0f, 0},
                          Case{256, 16, 64, false, true, 0.5f, 1.0f, 5}}) {
      Operands o = Make(t, rng);
      const std::vector<double> want = Reference(t, o, false);
      std::vector<float> c = o.c;
      GemmWith(GemmBackend::kOneDnn, t.trans_a, t.trans_b, t.m, t.n, t.k, t.alpha, o.a.data(),
               o.lda, o.b.data(), o.ldb, t.beta, c.data(), o.ldc);
      ExpectClose(t, o, c, want, 2e-5);
      for (int i = 0; i < t.m; ++i)
        for (int j = t.n; j < o.ldc; ++j) ASSERT_EQ(c[size_t(i) * o.ldc + j], o.c[size_t(i) * o.ldc + j]);
    }
  }
  omp_set_num_threads(before);
}

TEST(Gemm, Bf16ComputeMultipliesTheRoundedOperands) {
  if (dnnl_get_effective_cpu_isa() < dnnl_cpu_isa_avx512_core)
    GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  std::mt19937 rng(11);
  for (const Case &t : Cases()) {
    Operands o = Make(t, rng);
    std::vector<float> c = o.c;
    Gemm(ComputeType::kBf16, t.trans_a, t.trans_b, t.m, t.n, t.k, t.alpha, o.a.data(), o.lda,
         o.b.data(), o.ldb, t.beta, c.data(), o.ldc);
    // Equal to the product of the rounded operands up to fp32 accumulation...
    ExpectClose(t, o, c, Reference(t, o, true), 2e-5);
    // ...and not to the unrounded one: the operands really were rounded.
    const std::vector<double> exact = Reference(t, o, false);
    double worst = 0;
    for (int i = 0; i < t.m; ++i)
      for (int j = 0; j < t.n; ++j)
        worst = std::max(worst, std::fabs(c[size_t(i) * o.ldc + j] - exact[size_t(i) * o.ldc + j]));
    EXPECT_GT(worst, 1e-4) << "m=" << t.m << " n=" << t.n << " k=" << t.k;
  }
}

TEST(Gemm, Bf16ComputeOfBf16GridOperandsIsTheFp32Product) {
  if (dnnl_get_effective_cpu_isa() < dnnl_cpu_isa_avx512_core)
    GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  // bf16 training's weights and activations are already on the bf16 grid:
  // rounding them changes nothing, so bf16 compute = fp32 compute up to order.
  std::mt19937 rng(13);
  const Case t{48, 40, 96, false, true, 1.0f, 1.0f, 2};
  Operands o = Make(t, rng);
  for (float &x : o.a) x = RoundBf16(x);
  for (float &x : o.b) x = RoundBf16(x);
  std::vector<float> bf16 = o.c, fp32 = o.c;
  Gemm(ComputeType::kBf16, t.trans_a, t.trans_b, t.m, t.n, t.k, t.alpha, o.a.data(), o.lda,
       o.b.data(), o.ldb, t.beta, bf16.data(), o.ldc);
  Gemm(ComputeType::kFp32, t.trans_a, t.trans_b, t.m, t.n, t.k, t.alpha, o.a.data(), o.lda,
       o.b.data(), o.ldb, t.beta, fp32.data(), o.ldc);
  ExpectClose(t, o, bf16, std::vector<double>(fp32.begin(), fp32.end()), 2e-5);
}

TEST(Gemm, TheChoiceForBf16TrainingHasAReason) {
  const Bf16ComputeChoice &choice = Bf16Compute();
  EXPECT_TRUE(choice.error.empty()) << choice.error;
  EXPECT_FALSE(choice.reason.empty());
}

}  // namespace
}  // namespace dst::cpu
