// How a row-major GEMM (cpu::Gemm's contract: C[m, n] = alpha op(A) op(B) +
// beta C, every matrix row-major with its leading dimension) becomes a call
// of column-major cuBLAS(Lt), and how much workspace cuBLASLt gets. Host-only
// C++ shared by the CUDA plugin and the CPU unit tests, which check the
// translation against a column-major reference product.
#pragma once

#include <cstdint>

namespace dst::cuda {

// One operand of a column-major GEMM as cuBLASLt's matrix layout describes it:
// the stored matrix is rows x cols with leading dimension ld (before its op).
struct ColumnMajorOperand {
  const void *data = nullptr;
  bool transposed = false;
  int64_t rows = 0, cols = 0, ld = 0;
  int64_t batch_stride = 0;  // elements between the matrices of a strided batch
};

// D[m, n] = alpha op(first) op(second) + beta C, column-major.
struct ColumnMajorGemm {
  int64_t m = 0, n = 0, k = 0;
  ColumnMajorOperand first, second;
  int64_t ldc = 0;
  int batch = 1;               // matrices in a strided batch
  int64_t c_batch_stride = 0;  // elements between the batch's results
};

// A row-major matrix is its transpose column-major, so row-major C = op(A)
// op(B) is column-major C^T = op(B)^T op(A)^T: B comes first, the sizes m
// and n swap, each operand keeps its own transpose flag, and every leading
// dimension stays as given.
inline ColumnMajorGemm FromRowMajor(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                    const void *a, int64_t lda, const void *b, int64_t ldb,
                                    int64_t ldc) {
  ColumnMajorGemm g;
  g.m = n;
  g.n = m;
  g.k = k;
  // First: op(B)^T, [n, k]. Row-major B's memory read column-major is B^T
  // (rows n, cols k) when B is not transposed; when it is (stored n x k), the
  // memory reads as a k x n matrix whose transpose is wanted.
  g.first = {b, trans_b, trans_b ? k : n, trans_b ? n : k, ldb};
  // Second: op(A)^T, [k, m], the same way.
  g.second = {a, trans_a, trans_a ? m : k, trans_a ? k : m, lda};
  g.ldc = ldc;
  return g;
}

// FromRowMajor as a strided batch of `batch` products: the i-th multiplies
// A + i a_stride by B + i b_stride into C + i c_stride (row-major strides in
// elements; B is the first operand column-major, A the second).
inline ColumnMajorGemm BatchedFromRowMajor(bool trans_a, bool trans_b, int64_t m, int64_t n,
                                           int64_t k, const void *a, int64_t lda, int64_t a_stride,
                                           const void *b, int64_t ldb, int64_t b_stride,
                                           int64_t ldc, int64_t c_stride, int batch) {
  ColumnMajorGemm g = FromRowMajor(trans_a, trans_b, m, n, k, a, lda, b, ldb, ldc);
  g.batch = batch;
  g.first.batch_stride = b_stride;
  g.second.batch_stride = a_stride;
  g.c_batch_stride = c_stride;
  return g;
}

// cuBLASLt workspace: 32 MiB on Hopper (compute capability 9.x), where the
// fastest kernels want it, 4 MiB before (NVIDIA's guidance for cuBLAS).
inline int64_t GemmWorkspaceBytes(int compute_capability_major) {
  return compute_capability_major >= 9 ? int64_t(32) << 20 : int64_t(4) << 20;
}

}  // namespace dst::cuda
