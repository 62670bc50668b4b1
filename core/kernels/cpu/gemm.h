// Row-major GEMM: C = alpha * op(A) * op(B) + beta * C, with op(X) = X or X^T.
// m, n, k are the sizes of op(A) [m,k], op(B) [k,n], C [m,n]; lda/ldb/ldc are
// the row strides of the stored matrices.
//
// fp32 goes through the GEMM backend chosen once per process (GemmBackend):
// oneDNN's sgemm by default, because its JIT picks the instruction set at run
// time, while OpenBLAS 0.3.21 (Debian 12) runs its generic SSE3 kernels on CPUs
// newer than itself (about 5x slower on a Sapphire-Rapids-class Xeon).
// DSTRAIN_GEMM=openblas|onednn forces one. fp64 (gradient checks) stays on
// OpenBLAS.
#pragma once

#include <cblas.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/kernels/compute_type.h"

namespace dst::cpu {

enum class GemmBackend { kOneDnn, kOpenBlas };

// The backend fp32 GEMMs use in this process (DSTRAIN_GEMM, else oneDNN).
GemmBackend ActiveGemmBackend();
const char *GemmBackendName(GemmBackend backend);
// What the backend runs on this CPU: oneDNN's effective ISA (e.g. "avx512_core_bf16")
// or OpenBLAS's core name (e.g. "SkylakeX", "Prescott" = generic).
std::string GemmBackendTarget(GemmBackend backend);
// Empty, or why OpenBLAS's own kernels are slow here (a generic core).
std::string OpenBlasGenericCoreNote();
// Empty when DSTRAIN_GEMM is unset or valid; else the error text naming the values.
std::string GemmBackendEnvError();

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
          const float *b, int ldb, float beta, float *c, int ldc);

// fp32 operands, multiplied as `compute` says (kBf16: oneDNN's matmul on bf16
// copies of A and B in per-thread scratch, its primitives created once per
// shape per thread; a shape oneDNN refuses falls back to fp32).
void Gemm(ComputeType compute, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
// An operand of GemmBf16: fp32 (rounded to bf16 in per-thread scratch, as
// Gemm does) or already on the bf16 grid (bf16 set: a matrix rounded once and
// multiplied twice, e.g. a layer's output gradient). Stored row-major, row
// stride ld; op(X) as the GEMM's trans flag says.
struct GemmOperand {
  const float *f32 = nullptr;
  const uint16_t *bf16 = nullptr;
  int ld = 0;
};
inline GemmOperand Fp32Operand(const float *x, int ld) {
  return {x, nullptr, ld};
}
inline GemmOperand Bf16Operand(const uint16_t *x, int ld) {
  return {nullptr, x, ld};
}

// C = alpha op(A) op(B) + beta C in bf16 with fp32 accumulation (what Gemm
// with ComputeType::kBf16 computes, the same bits for the same values). Where
// oneDNN refuses a shape, the bf16 operands are widened and multiplied in fp32.
void GemmBf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, GemmOperand a,
              GemmOperand b, float beta, float *c, int ldc);

// C [m, n] = op(A) op(B) + bias, bias [n] added to every row (nn.Linear's
// forward) as oneDNN writes the product, not in a pass of its own.
void GemmBf16Bias(bool trans_a, bool trans_b, int m, int n, int k, GemmOperand a, GemmOperand b,
                  const float *bias, float *c, int ldc);

// x [rows, cols] (row stride ld) rounded to bf16 into out [rows, cols], dense,
// grown to fit (a step's scratch, reused); FloatToBFloat16's bits. Rows split
// over the OpenMP threads when there are many; 16 lanes where the CPU has
// AVX-512F (every CPU bf16 compute runs on).
void RoundToBf16(const float *x, int64_t rows, int64_t cols, int64_t ld,
                 std::vector<uint16_t> &out);
// The same into out [rows, cols] (dense) the caller holds.
void RoundToBf16(const float *x, int64_t rows, int64_t cols, int64_t ld, uint16_t *out);
// One row's n values (no threads): FloatToBFloat16's bits.
void RoundRowToBf16(const float *x, uint16_t *out, int64_t n);

// fp64 has no bf16 path (gradient checks): always fp64.
inline void Gemm(ComputeType, bool trans_a, bool trans_b, int m, int n, int k, double alpha,
                 const double *a, int lda, const double *b, int ldb, double beta, double *c,
                 int ldc);

// Whether bf16 training computes its GEMMs in bf16 on this CPU, and why:
// DSTRAIN_BF16_COMPUTE=on|off forces it; otherwise (auto) where the bf16 dot
// products are faster than fp32 FMAs: AMX-BF16, or AVX512-BF16 on AMD (Zen 4
// and later); not on Intel cores with AVX512-BF16 alone, whose VDPBF16PS
// issues on one port (measured: half the fp32 rate), nor without AVX512-BF16.
struct Bf16ComputeChoice {
  bool enabled = false;
  std::string reason;
  std::string error;  // DSTRAIN_BF16_COMPUTE holds something else
};
const Bf16ComputeChoice &Bf16Compute();

// The same product through a named backend (benchmarks, tests).
void GemmWith(GemmBackend backend, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
              const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

inline void Gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void Gemm(ComputeType, bool trans_a, bool trans_b, int m, int n, int k, double alpha,
                 const double *a, int lda, const double *b, int ldb, double beta, double *c,
                 int ldc) {
  Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace dst::cpu
