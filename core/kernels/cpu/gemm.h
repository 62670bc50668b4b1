// Row-major GEMM through OpenBLAS: C = alpha * op(A) * op(B) + beta * C, with
// op(X) = X or X^T. m, n, k are the sizes of op(A) [m,k], op(B) [k,n], C [m,n];
// lda/ldb/ldc are the row strides of the stored matrices.
#pragma once

#include <cblas.h>

namespace dst::cpu {

inline void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void Gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace dst::cpu
