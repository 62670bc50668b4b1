// GEMMs through cuBLASLt, with cpu::Gemm's row-major contract (translated by
// gemm_layout.h): fp32 (optionally TF32 tensor cores), and bf16 / fp16
// operands with fp32 accumulation and an fp32 result, as the 16-bit training
// path needs. The heuristic picks the algorithm within the architecture's
// workspace (GemmWorkspaceBytes). Tested and timed on an H200 (2026-11-26):
// bench/bench_gpu_gemm.py through dst_cuda_plugin_gemm_bench.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/kernels/cuda/cublaslt.cuh"
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

}  // namespace

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

void MakePlan(cublasLtHandle_t handle, const ColumnMajorGemm &g, cudaDataType_t operand,
              cudaDataType_t out, cublasComputeType_t compute, size_t workspace_bytes, LtPlan *plan,
              uint32_t alignment) {
  LtCall &call = plan->call;
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
    st = cublasLtMatrixLayoutCreate(&call.c, out, uint64_t(g.m), uint64_t(g.n), g.ldc);
  if (g.batch > 1) {
    const int32_t count = g.batch;
    const int64_t strides[3] = {g.first.batch_stride, g.second.batch_stride, g.c_batch_stride};
    cublasLtMatrixLayout_t layouts[3] = {call.a, call.b, call.c};
    for (int i = 0; i < 3 && st == CUBLAS_STATUS_SUCCESS; ++i) {
      st = cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                            sizeof count);
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(layouts[i],
                                              CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &strides[i], sizeof strides[i]);
    }
  }
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&call.preference);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(call.preference,
                                              CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &workspace_bytes, sizeof workspace_bytes);
  for (const cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (st == CUBLAS_STATUS_SUCCESS)
      st =
          cublasLtMatmulPreferenceSetAttribute(call.preference, attr, &alignment, sizeof alignment);
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle, call.op, call.a, call.b, call.c, call.c,
                                        call.preference, 1, &plan->heuristic, &found);
  if (st == CUBLAS_STATUS_SUCCESS && found == 0) st = CUBLAS_STATUS_NOT_SUPPORTED;
  plan->status = st;
}

cublasStatus_t RunPlan(cublasLtHandle_t handle, const LtPlan &plan, const ColumnMajorGemm &g,
                       float alpha, float beta, void *d, void *workspace, size_t workspace_bytes,
                       cudaStream_t stream) {
  if (plan.status != CUBLAS_STATUS_SUCCESS) return plan.status;
  return cublasLtMatmul(handle, plan.call.op, &alpha, g.first.data, plan.call.a, g.second.data,
                        plan.call.b, &beta, d, plan.call.c, d, plan.call.c, &plan.heuristic.algo,
                        workspace, workspace_bytes, stream);
}

cublasStatus_t Matmul(cublasLtHandle_t handle, const ColumnMajorGemm &g, cudaDataType_t operand,
                      cudaDataType_t out, cublasComputeType_t compute, float alpha, float beta,
                      void *d, void *workspace, size_t workspace_bytes) {
  LtPlan plan;
  MakePlan(handle, g, operand, out, compute, workspace_bytes, &plan);
  return RunPlan(handle, plan, g, alpha, beta, d, workspace, workspace_bytes);
}

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
    lt = cuda::Matmul(handle, g, operand, CUDA_R_32F, compute, alpha, beta, d_c.get(),
                      workspace.get(), workspace_bytes);
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

// What dst_cuda_plugin_gemm_bench varies besides the type.
enum GemmBenchFlags : int {
  kBenchSixteenBitOut = 1,  // C in the operands' 16-bit type (bf16 / fp16 only), not fp32
  kBenchPlanOnce = 2,       // descriptors and heuristic once, not per call
};

// Times row-major C[m, n] = A[m, k] B[k, n] on device-resident operands of
// `type` (a cuda::GemmType), `flags` GemmBenchFlags. By default each of the
// `iters` calls builds its cuBLASLt descriptors and asks the heuristic, as
// dst_cuda_plugin_gemm does. Writes the mean milliseconds per GEMM (CUDA
// events, after one untimed call). For bench/bench_gpu_gemm.py. Returns 0, 1
// without a device, 2 on an error (err[cap]).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_gemm_bench(
    int type, int flags, long m, long n, long k, int iters, double *ms_per_gemm, char *err,
    size_t cap) {
  if (!cuda::HasDevice()) return 1;
  const cuda::GemmType t = cuda::GemmType(type);
  const bool wide = t == cuda::GemmType::kFp32 || t == cuda::GemmType::kTf32;
  const bool out16 = !wide && (flags & kBenchSixteenBitOut) != 0;
  const size_t element = wide ? 4 : 2;
  cudaError_t st = cudaSuccess;
  cuda::DeviceArray<uint8_t> a(nullptr, size_t(m * k) * element, &st),
      b(nullptr, size_t(k * n) * element, &st);
  cuda::DeviceArray<uint8_t> c(nullptr, size_t(m * n) * (out16 ? 2 : 4), &st);
  cudaDeviceProp prop{};
  if (st == cudaSuccess) st = cudaGetDeviceProperties(&prop, 0);
  const size_t workspace_bytes = size_t(cuda::GemmWorkspaceBytes(prop.major));
  cuda::DeviceArray<uint8_t> workspace(nullptr, workspace_bytes, &st);
  if (st == cudaSuccess) {
    if (wide) {
      st = cuda::FillRandom(reinterpret_cast<float *>(a.get()), m * k, 1u);
      if (st == cudaSuccess) st = cuda::FillRandom(reinterpret_cast<float *>(b.get()), k * n, 2u);
    } else if (t == cuda::GemmType::kBf16) {
      st = cuda::FillRandom(reinterpret_cast<__nv_bfloat16 *>(a.get()), m * k, 1u);
      if (st == cudaSuccess)
        st = cuda::FillRandom(reinterpret_cast<__nv_bfloat16 *>(b.get()), k * n, 2u);
    } else {
      st = cuda::FillRandom(reinterpret_cast<__half *>(a.get()), m * k, 1u);
      if (st == cudaSuccess) st = cuda::FillRandom(reinterpret_cast<__half *>(b.get()), k * n, 2u);
    }
  }
  if (st != cudaSuccess) return cuda::Fail(err, cap, "gemm bench (device buffers)", st);
  const cuda::ColumnMajorGemm g =
      cuda::FromRowMajor(false, false, m, n, k, a.get(), k, b.get(), n, n);
  const cudaDataType_t operand = wide                         ? CUDA_R_32F
                                 : t == cuda::GemmType::kBf16 ? CUDA_R_16BF
                                                              : CUDA_R_16F;
  const cudaDataType_t out = out16 ? operand : CUDA_R_32F;
  const cublasComputeType_t compute =
      t == cuda::GemmType::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasLtHandle_t handle = nullptr;
  cublasStatus_t lt = cublasLtCreate(&handle);
  if (lt == CUBLAS_STATUS_SUCCESS) {
    cuda::LtPlan plan;
    cuda::MakePlan(handle, g, operand, out, compute, workspace_bytes, &plan);
    const auto once = [&] {
      if ((flags & kBenchPlanOnce) != 0)
        return cuda::RunPlan(handle, plan, g, 1.0f, 0.0f, c.get(), workspace.get(),
                             workspace_bytes);
      return cuda::Matmul(handle, g, operand, out, compute, 1.0f, 0.0f, c.get(), workspace.get(),
                          workspace_bytes);
    };
    cudaEvent_t start = nullptr, stop = nullptr;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    lt = once();
    cudaEventRecord(start);
    for (int i = 0; i < iters && lt == CUBLAS_STATUS_SUCCESS; ++i) lt = once();
    cudaEventRecord(stop);
    st = cudaEventSynchronize(stop);
    float ms = 0.0f;
    if (st == cudaSuccess) st = cudaEventElapsedTime(&ms, start, stop);
    *ms_per_gemm = double(ms) / (iters > 0 ? iters : 1);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cublasLtDestroy(handle);
  }
  if (lt != CUBLAS_STATUS_SUCCESS) {
    if (err != nullptr && cap > 0) std::snprintf(err, cap, "gemm bench: %s", cuda::LtError(lt));
    return 2;
  }
  return st == cudaSuccess ? 0 : cuda::Fail(err, cap, "gemm bench", st);
}
