// GEMMs through cuBLASLt, with cpu::Gemm's row-major contract (translated by
// gemm_layout.h): fp32 (optionally TF32 tensor cores), and bf16 / fp16
// operands with fp32 accumulation and an fp32 result, as the 16-bit training
// path needs. The heuristic picks the algorithm within the architecture's
// workspace (GemmWorkspaceBytes). Not yet run on a GPU (issue 16).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/kernels/cuda/gemm_layout.h"
#include "core/kernels/cuda/plugin_support.cuh"

namespace dst::cuda {

// What the operands hold and what the products accumulate in.
enum class GemmType : int { kFp32 = 0, kTf32 = 1, kBf16 = 2, kFp16 = 3 };

namespace {

// x[i] rounded into a 16-bit type (round to nearest even, as the host casts).
__global__ void ToBf16Kernel(const float *x, __nv_bfloat16 *y, long n) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}
__global__ void ToFp16Kernel(const float *x, __half *y, long n) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    y[i] = __float2half_rn(x[i]);
}

// cuBLASLt's objects for one call, destroyed in reverse order.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtCall() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

const char *LtError(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "cuBLASLt not initialised";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "cuBLASLt could not allocate";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "not supported on this architecture";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "this combination of types and layouts is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the kernel failed";
    default:
      return "cuBLASLt error";
  }
}

// D = alpha op(first) op(second) + beta D on device memory (column-major g),
// operands of `operand_type`, D fp32.
cublasStatus_t Matmul(cublasLtHandle_t handle, const ColumnMajorGemm &g, cudaDataType_t operand,
                      cublasComputeType_t compute, float alpha, float beta, float *d,
                      void *workspace, size_t workspace_bytes) {
  LtCall call;
  cublasStatus_t st = cublasLtMatmulDescCreate(&call.op, compute, CUDA_R_32F);
  const cublasOperation_t ta = g.first.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.second.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&call.a, operand, uint64_t(g.first.rows),
                                    uint64_t(g.first.cols), g.first.ld);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&call.b, operand, uint64_t(g.second.rows),
                                    uint64_t(g.second.cols), g.second.ld);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatrixLayoutCreate(&call.c, CUDA_R_32F, uint64_t(g.m), uint64_t(g.n), g.ldc);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&call.preference);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(call.preference,
                                              CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &workspace_bytes, sizeof workspace_bytes);
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle, call.op, call.a, call.b, call.c, call.c,
                                        call.preference, 1, &heuristic, &found);
  if (st == CUBLAS_STATUS_SUCCESS && found == 0) st = CUBLAS_STATUS_NOT_SUPPORTED;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmul(handle, call.op, &alpha, g.first.data, call.a, g.second.data, call.b, &beta,
                        d, call.c, d, call.c, &heuristic.algo, workspace, workspace_bytes, nullptr);
  return st;
}

}  // namespace

}  // namespace dst::cuda

namespace cuda = dst::cuda;

// Row-major C[m, n] = alpha op(A) op(B) + beta C on host arrays (device 0),
// `type` a cuda::GemmType: fp32, TF32, or A and B rounded to bf16 / fp16 on
// the device (fp32 accumulation and result). Returns 0, 1 when there is no
// device, 2 on an error (err[cap]).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_gemm(
    int type, int trans_a, int trans_b, long m, long n, long k, float alpha, const float *a,
    long lda, const float *b, long ldb, float beta, float *c, long ldc, char *err, size_t cap) {
  if (!cuda::HasDevice()) return 1;
  const cuda::GemmType t = cuda::GemmType(type);
  const size_t a_count = size_t((trans_a ? k : m) * lda), b_count = size_t((trans_b ? n : k) * ldb);
  const size_t c_count = size_t(m * ldc);
  cudaError_t st = cudaSuccess;
  cuda::DeviceArray<float> d_a(a, a_count, &st), d_b(b, b_count, &st), d_c(c, c_count, &st);
  const bool wide = t == cuda::GemmType::kFp32 || t == cuda::GemmType::kTf32;
  cuda::DeviceArray<uint16_t> h_a(nullptr, wide ? 1 : a_count, &st),
      h_b(nullptr, wide ? 1 : b_count, &st);
  cudaDeviceProp prop{};
  if (st == cudaSuccess) st = cudaGetDeviceProperties(&prop, 0);
  const size_t workspace_bytes = size_t(cuda::GemmWorkspaceBytes(prop.major));
  cuda::DeviceArray<uint8_t> workspace(nullptr, workspace_bytes, &st);
  if (st == cudaSuccess && !wide) {
    const cuda::Launch la = cuda::ElementwiseLaunch(long(a_count)),
                       lb = cuda::ElementwiseLaunch(long(b_count));
    if (t == cuda::GemmType::kBf16) {
      cuda::ToBf16Kernel<<<la.blocks, la.threads>>>(
          d_a.get(), reinterpret_cast<__nv_bfloat16 *>(h_a.get()), long(a_count));
      cuda::ToBf16Kernel<<<lb.blocks, lb.threads>>>(
          d_b.get(), reinterpret_cast<__nv_bfloat16 *>(h_b.get()), long(b_count));
    } else {
      cuda::ToFp16Kernel<<<la.blocks, la.threads>>>(
          d_a.get(), reinterpret_cast<__half *>(h_a.get()), long(a_count));
      cuda::ToFp16Kernel<<<lb.blocks, lb.threads>>>(
          d_b.get(), reinterpret_cast<__half *>(h_b.get()), long(b_count));
    }
    st = cudaGetLastError();
  }
  if (st != cudaSuccess) return cuda::Fail(err, cap, "gemm (device buffers)", st);
  cublasLtHandle_t handle = nullptr;
  cublasStatus_t lt = cublasLtCreate(&handle);
  if (lt == CUBLAS_STATUS_SUCCESS) {
    const void *da = wide ? static_cast<const void *>(d_a.get()) : h_a.get();
    const void *db = wide ? static_cast<const void *>(d_b.get()) : h_b.get();
    const cuda::ColumnMajorGemm g =
        cuda::FromRowMajor(trans_a != 0, trans_b != 0, m, n, k, da, lda, db, ldb, ldc);
    const cudaDataType_t operand = wide                         ? CUDA_R_32F
                                   : t == cuda::GemmType::kBf16 ? CUDA_R_16BF
                                                                : CUDA_R_16F;
    const cublasComputeType_t compute =
        t == cuda::GemmType::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    lt = cuda::Matmul(handle, g, operand, compute, alpha, beta, d_c.get(), workspace.get(),
                      workspace_bytes);
    cublasLtDestroy(handle);
  }
  if (lt != CUBLAS_STATUS_SUCCESS) {
    if (err != nullptr && cap > 0) std::snprintf(err, cap, "gemm: %s", cuda::LtError(lt));
    return 2;
  }
  st = cudaDeviceSynchronize();
  d_c.CopyTo(c);
  return st == cudaSuccess ? 0 : cuda::Fail(err, cap, "gemm", st);
}
