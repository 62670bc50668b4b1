#include "core/kernels/cpu/gemm.h"

#include "core/kernels/cpu/cpu_isa.h"

#include <oneapi/dnnl/dnnl.h>

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

void GemmWith(GemmBackend backend, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
              const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  if (backend == GemmBackend::kOneDnn &&
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c,
                 ldc) == dnnl_success)
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
