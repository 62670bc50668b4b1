#include "core/kernels/cpu/gemm.h"

#include "core/kernels/cpu/cpu_isa.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace dst::cpu {

namespace {

// DSTRAIN_GEMM's backend; `valid` false for a value that names none.
GemmBackend BackendFromEnv(bool *valid) {
  *valid = true;
  const char *text = std::getenv("DSTRAIN_GEMM");
  if (text == nullptr || *text == '\0' || std::strcmp(text, "onednn") == 0)
    return GemmBackend::kOneDnn;
  if (std::strcmp(text, "openblas") == 0) return GemmBackend::kOpenBlas;
  *valid = false;
  return GemmBackend::kOneDnn;
}

void OpenBlasGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                  int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

GemmBackend ActiveGemmBackend() {
  static const GemmBackend backend = [] {
    CpuIsaCap();  // caps oneDNN before its first GEMM
    bool valid = true;
    return BackendFromEnv(&valid);
  }();
  return backend;
}

std::string GemmBackendEnvError() {
  bool valid = true;
  BackendFromEnv(&valid);
  if (valid) return "";
  return std::string("DSTRAIN_GEMM=\"") + std::getenv("DSTRAIN_GEMM") +
         "\" names no GEMM backend: use \"onednn\" (the default) or \"openblas\"";
}

const char *GemmBackendName(GemmBackend backend) {
  return backend == GemmBackend::kOneDnn ? "oneDNN" : "OpenBLAS";
}

std::string GemmBackendTarget(GemmBackend backend) {
  CpuIsaCap();
  if (backend == GemmBackend::kOneDnn) return OneDnnIsa();
  const char *core = openblas_get_corename();
  return core != nullptr ? core : "unknown";
}

std::string OpenBlasGenericCoreNote() {
  const char *core = openblas_get_corename();
  if (core == nullptr) return "";
  for (const char *generic : {"Prescott", "Core2", "Katmai", "Banias", "Generic", "unknown"}) {
    if (strcasecmp(core, generic) == 0)
      return std::string("OpenBLAS does not know this CPU and runs its generic ") + core +
             " kernels (SSE3); OPENBLAS_CORETYPE=SkylakeX (or Haswell) set before the process "
             "starts fixes it for OpenBLAS users such as PyTorch";
  }
  return "";
}

namespace {

// Threads a forward GEMM's rows are split over by hand, or 1. oneDNN's own
// threading of X W^T with few output columns and a longer reduction (a
// row-parallel projection's forward: LLaMA's down_proj [2048 x 1024] x
// [1024 -> 384], GPT's mlp.c_proj) runs at 70-85% of its rate on two threads
// (measured: 148 and 174 GFLOP/s against 201 and 199 split by rows); rows
// split between the threads, each a one-thread GEMM, keep the rate. Every
// thread gets at least 64 rows.
int RowSplitThreads(bool trans_a, bool trans_b, int m, int n, int k) {
  if (trans_a || !trans_b || k < 2 * n || omp_in_parallel()) return 1;
  return std::min(omp_get_max_threads(), m / 64);
}

bool OneDnnGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  const int split = RowSplitThreads(trans_a, trans_b, m, n, k);
  if (split <= 1)
    return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                      beta, c, ldc) == dnnl_success;
  // Blocks of whole 8-row groups; the last takes the rest. oneDNN refuses
  // only bad arguments, the same in every block: all succeed or none writes.
  const int rows = (m / split) / 8 * 8;
  bool ok = true;
#pragma omp parallel for num_threads(split) schedule(static) reduction(&& : ok)
  for (int t = 0; t < split; ++t) {
    const int first = t * rows, count = t + 1 == split ? m - first : rows;
    ok = dnnl_sgemm('N', 'T', count, n, k, alpha, a + int64_t(first) * lda, lda, b, ldb, beta,
                    c + int64_t(first) * ldc, ldc) == dnnl_success;
  }
  return ok;
}

}  // namespace

void GemmWith(GemmBackend backend, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
              const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  if (backend == GemmBackend::kOneDnn &&
      OneDnnGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  // OpenBLAS: chosen, or oneDNN refused the arguments (it checks what OpenBLAS
  // would also check; both compute the same product).
  OpenBlasGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
          const float *b, int ldb, float beta, float *c, int ldc) {
  GemmWith(ActiveGemmBackend(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace dst::cpu
