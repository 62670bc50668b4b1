// The CUDA plugin's row-major -> column-major GEMM translation
// (core/kernels/cuda/gemm_layout.h), checked on the CPU: a naive
// column-major product of the translated operands equals the row-major
// product cpu::Gemm computes, for every transpose combination and padded
// leading dimensions.
#include "core/kernels/cuda/gemm_layout.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/kernels/cpu/gemm.h"

namespace dst::cuda {
namespace {

// Element (i, j) of a column-major operand after its op.
float At(const ColumnMajorOperand &x, int64_t i, int64_t j) {
  const float *data = static_cast<const float *>(x.data);
  return x.transposed ? data[i * x.ld + j] : data[j * x.ld + i];
}

TEST(CudaGemmLayout, TheColumnMajorProductIsTheRowMajorOne) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t m = 5, n = 7, k = 3, pad = 2;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // Row-major stored shapes: A is m x k (k x m when transposed), B k x n (n x k).
      const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
      std::vector<float> a(size_t((ta ? k : m) * lda)), b(size_t((tb ? n : k) * ldb));
      for (float &x : a) x = u(rng);
      for (float &x : b) x = u(rng);
      std::vector<float> want(size_t(m * ldc), 0.0f), got(size_t(m * ldc), 0.0f);
      cpu::Gemm(ta, tb, int(m), int(n), int(k), 1.0f, a.data(), int(lda), b.data(), int(ldb), 0.0f,
                want.data(), int(ldc));
      const ColumnMajorGemm g = FromRowMajor(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, ldc);
      ASSERT_EQ(g.m, n);
      ASSERT_EQ(g.n, m);
      // The stored shapes fit the buffers: rows <= ld for a column-major matrix.
      EXPECT_LE(g.first.rows, g.first.ld);
      EXPECT_LE(g.second.rows, g.second.ld);
      for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < g.n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < g.k; ++p) sum += double(At(g.first, i, p)) * At(g.second, p, j);
          got[size_t(j * g.ldc + i)] = float(sum);  // column-major D
        }
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          EXPECT_NEAR(got[size_t(i * ldc + j)], want[size_t(i * ldc + j)], 1e-5)
              << "ta " << ta << " tb " << tb << " at " << i << "," << j;
    }
}

TEST(CudaGemmLayout, WorkspaceFollowsTheArchitecture) {
  EXPECT_EQ(GemmWorkspaceBytes(8), int64_t(4) << 20);
  EXPECT_EQ(GemmWorkspaceBytes(9), int64_t(32) << 20);
}

}  // namespace
}  // namespace dst::cuda
