// cuBLASLt as the plugin's kernels use it (defined in gemm.cu): a GEMM is
// planned once (descriptors, a strided batch if any, and the algorithm the
// heuristic picks within the workspace) and run as often as needed with the
// operands' pointers of that call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "core/kernels/cuda/gemm_layout.h"

namespace dst::cuda {

// cuBLASLt's objects for one plan, destroyed in reverse order.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  LtCall() = default;
  LtCall(const LtCall &) = delete;
  LtCall &operator=(const LtCall &) = delete;
  ~LtCall() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// One GEMM's plan. `status` is the first failure, if any.
struct LtPlan {
  LtCall call;
  cublasLtMatmulHeuristicResult_t heuristic{};
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
};

// What a cuBLASLt status means, in words.
const char *LtError(cublasStatus_t status);

// Plans D = alpha op(first) op(second) + beta D (column-major g, a strided
// batch when g.batch > 1), operands of `operand` type, D of `out` type (fp32,
// or the operands' 16-bit type). `alignment`: the bytes every pointer the
// plan will run with is a multiple of (cuBLASLt assumes 256 unless told:
// tensors inside a flat buffer are often less aligned).
void MakePlan(cublasLtHandle_t handle, const ColumnMajorGemm &g, cudaDataType_t operand,
              cudaDataType_t out, cublasComputeType_t compute, size_t workspace_bytes, LtPlan *plan,
              uint32_t alignment = 256);

// Runs a plan on `stream` (the default one unless given) with g's operand
// pointers and d.
cublasStatus_t RunPlan(cublasLtHandle_t handle, const LtPlan &plan, const ColumnMajorGemm &g,
                       float alpha, float beta, void *d, void *workspace, size_t workspace_bytes,
                       cudaStream_t stream = nullptr);

// Plans and runs one GEMM (what each training call does today).
cublasStatus_t Matmul(cublasLtHandle_t handle, const ColumnMajorGemm &g, cudaDataType_t operand,
                      cudaDataType_t out, cublasComputeType_t compute, float alpha, float beta,
                      void *d, void *workspace, size_t workspace_bytes);

}  // namespace dst::cuda
