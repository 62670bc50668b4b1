// Causal attention as batched GEMMs through cuBLASLt plus two row kernels,
// the way llm.c's CUDA trainer does it before a fused kernel: the T x T
// probabilities are kept ([B, H, T, T], as the CPU engine saves them), the
// matrix units do the products, and the upper triangle is computed and then
// zeroed (twice the causal work, at GEMM speed). Per batch row b, one strided
// batch over the H heads (a head's rows are hs apart inside qkv's 3C):
//   forward   S = scale q k^T  ->  P = causal softmax(S)  ->  y = P v
//   backward  dP = dy v^T  ->  dS = P (dP - <P, dP>)  ->  dq = scale dS k,
//             dk = scale dS^T q, dv = P^T dy
// fp32 operands and accumulation (the CPU's tolerance); a plan per product
// is made once per call and run for every b.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdio>

#include "core/kernels/cuda/cublaslt.cuh"
#include "core/kernels/cuda/plugin_support.cuh"

namespace dst::cuda {

namespace {

// P in place of S, one warp a row of [B, H, T, T]: softmax over keys 0..t of
// the row's query t, zeros after.
__global__ void CausalSoftmaxRowsKernel(float *att, long rows, long T) {
  const long row = blockIdx.x * long(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const long t = row % T;
  float *a = att + row * T;
  float maxv = -INFINITY;
  for (long j = lane; j <= t; j += kWarp) maxv = fmaxf(maxv, a[j]);
  maxv = WarpMax(maxv);
  float sum = 0.0f;
  for (long j = lane; j <= t; j += kWarp) sum += expf(a[j] - maxv);
  const float inv = 1.0f / WarpSum(sum);
  for (long j = lane; j < T; j += kWarp) a[j] = j <= t ? expf(a[j] - maxv) * inv : 0.0f;
}

// dS in place of dP, one warp a row: dS = P (dP - <P, dP>) over keys 0..t,
// zeros after.
__global__ void SoftmaxBackwardRowsKernel(const float *att, float *dscore, long rows, long T) {
  const long row = blockIdx.x * long(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const long t = row % T;
  const float *p = att + row * T;
  float *d = dscore + row * T;
  float dot = 0.0f;
  for (long j = lane; j <= t; j += kWarp) dot += p[j] * d[j];
  dot = WarpSum(dot);
  for (long j = lane; j < T; j += kWarp) d[j] = j <= t ? p[j] * (d[j] - dot) : 0.0f;
}

// One of the attention's products, planned once and run for each batch row.
class HeadProduct {
 public:
  // Row-major C = op(A) op(B), strided over the H heads; the pointers given
  // are batch row 0's, `per_b` the elements each moves by from one b to the next.
  struct Operand {
    const float *data;
    long ld, head_stride, per_b;
  };
  HeadProduct(cublasLtHandle_t handle, const AttentionDims &s, bool trans_a, bool trans_b, long m,
              long n, long k, Operand a, Operand b, float *c, long ldc, long c_head_stride,
              long c_per_b, size_t workspace_bytes)
      : handle_(handle),
        s_(s),
        trans_a_(trans_a),
        trans_b_(trans_b),
        m_(m),
        n_(n),
        k_(k),
        a_(a),
        b_(b),
        c_(c),
        ldc_(ldc),
        c_head_stride_(c_head_stride),
        c_per_b_(c_per_b) {
    MakePlan(handle, Layout(0), CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, workspace_bytes,
             &plan_);
  }

  // C = alpha op(A) op(B) for every batch row, queued on `stream`.
  cublasStatus_t Run(float alpha, void *workspace, size_t workspace_bytes,
                     cudaStream_t stream) const {
    cublasStatus_t st = plan_.status;
    for (long b = 0; b < s_.B && st == CUBLAS_STATUS_SUCCESS; ++b)
      st = RunPlan(handle_, plan_, Layout(b), alpha, 0.0f, c_ + b * c_per_b_, workspace,
                   workspace_bytes, stream);
    return st;
  }

 private:
  ColumnMajorGemm Layout(long b) const {
    return BatchedFromRowMajor(trans_a_, trans_b_, m_, n_, k_, a_.data + b * a_.per_b, a_.ld,
                               a_.head_stride, b_.data + b * b_.per_b, b_.ld, b_.head_stride, ldc_,
                               c_head_stride_, int(s_.H));
  }

  cublasLtHandle_t handle_;
  AttentionDims s_;
  bool trans_a_, trans_b_;
  long m_, n_, k_;
  Operand a_, b_;
  float *c_;
  long ldc_, c_head_stride_, c_per_b_;
  LtPlan plan_;
};

}  // namespace

// att [B, H, T, T] (probabilities) and y [B, T, C] from qkv [B, T, 3C].
cublasStatus_t AttentionGemmForward(cublasLtHandle_t handle, const float *qkv,
                                    const AttentionDims &s, float *att, float *y, void *workspace,
                                    size_t workspace_bytes, cudaStream_t stream) {
  const long T = s.T, C = s.C, hs = s.hs();
  const HeadProduct::Operand q{qkv, 3 * C, hs, T * 3 * C}, k{qkv + C, 3 * C, hs, T * 3 * C},
      v{qkv + 2 * C, 3 * C, hs, T * 3 * C}, p{att, T, T * T, s.H * T * T};
  const HeadProduct scores(handle, s, false, true, T, T, hs, q, k, att, T, T * T, s.H * T * T,
                           workspace_bytes);
  const HeadProduct out(handle, s, false, false, T, hs, T, p, v, y, C, hs, T * C, workspace_bytes);
  cublasStatus_t st = scores.Run(1.0f / sqrtf(float(hs)), workspace, workspace_bytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const Launch l = WarpPerRowLaunch(s.rows(), 256);
  CausalSoftmaxRowsKernel<<<l.blocks, l.threads, 0, stream>>>(att, s.rows(), T);
  return out.Run(1.0f, workspace, workspace_bytes, stream);
}

// dqkv [B, T, 3C] (assigned) from dy [B, T, C], qkv and the forward's att;
// dscore is scratch [B, H, T, T].
cublasStatus_t AttentionGemmBackward(cublasLtHandle_t handle, const float *dy, const float *qkv,
                                     const float *att, const AttentionDims &s, float *dscore,
                                     float *dqkv, void *workspace, size_t workspace_bytes,
                                     cudaStream_t stream) {
  const long T = s.T, C = s.C, hs = s.hs();
  const float scale = 1.0f / sqrtf(float(hs));
  const HeadProduct::Operand q{qkv, 3 * C, hs, T * 3 * C}, k{qkv + C, 3 * C, hs, T * 3 * C},
      v{qkv + 2 * C, 3 * C, hs, T * 3 * C}, g{dy, C, hs, T * C}, p{att, T, T * T, s.H * T * T},
      ds{dscore, T, T * T, s.H * T * T};
  const HeadProduct dp(handle, s, false, true, T, T, hs, g, v, dscore, T, T * T, s.H * T * T,
                       workspace_bytes);
  const HeadProduct dq(handle, s, false, false, T, hs, T, ds, k, dqkv, 3 * C, hs, T * 3 * C,
                       workspace_bytes);
  const HeadProduct dk(handle, s, true, false, T, hs, T, ds, q, dqkv + C, 3 * C, hs, T * 3 * C,
                       workspace_bytes);
  const HeadProduct dv(handle, s, true, false, T, hs, T, p, g, dqkv + 2 * C, 3 * C, hs, T * 3 * C,
                       workspace_bytes);
  cublasStatus_t st = dp.Run(1.0f, workspace, workspace_bytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const Launch l = WarpPerRowLaunch(s.rows(), 256);
  SoftmaxBackwardRowsKernel<<<l.blocks, l.threads, 0, stream>>>(att, dscore, s.rows(), T);
  st = dq.Run(scale, workspace, workspace_bytes, stream);
  if (st == CUBLAS_STATUS_SUCCESS) st = dk.Run(scale, workspace, workspace_bytes, stream);
  if (st == CUBLAS_STATUS_SUCCESS) st = dv.Run(1.0f, workspace, workspace_bytes, stream);
  return st;
}

// The cuBLASLt handle and workspace the attention products run with, for one call.
struct GemmContext {
  cublasLtHandle_t handle = nullptr;
  size_t workspace_bytes = 0;
  DeviceArray<uint8_t> workspace;
  explicit GemmContext(cudaError_t *st) : workspace(nullptr, Bytes(), st) {
    workspace_bytes = Bytes();
    if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) handle = nullptr;
  }
  ~GemmContext() {
    if (handle) cublasLtDestroy(handle);
  }
  static size_t Bytes() {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    return size_t(GemmWorkspaceBytes(prop.major));
  }
};

cudaError_t BenchAttentionGemm(bool backward, const BenchDims &d, int iters, double *ms) {
  const AttentionDims s{d.B, d.T, d.C, d.H};
  const long BT = d.B * d.T;
  cudaError_t st = cudaSuccess;
  DeviceArray<float> qkv(nullptr, size_t(BT * 3 * d.C), &st), dy(nullptr, size_t(BT * d.C), &st),
      att(nullptr, size_t(s.rows() * d.T), &st), y(nullptr, size_t(BT * d.C), &st),
      dscore(nullptr, backward ? size_t(s.rows() * d.T) : 1, &st),
      dqkv(nullptr, backward ? size_t(BT * 3 * d.C) : 1, &st);
  GemmContext ctx(&st);
  if (st == cudaSuccess) st = FillRandom(qkv.get(), BT * 3 * d.C, 1u);
  if (st == cudaSuccess) st = FillRandom(dy.get(), BT * d.C, 2u);
  if (st != cudaSuccess) return st;
  if (ctx.handle == nullptr) return cudaErrorNotSupported;
  if (AttentionGemmForward(ctx.handle, qkv.get(), s, att.get(), y.get(), ctx.workspace.get(),
                           ctx.workspace_bytes, nullptr) != CUBLAS_STATUS_SUCCESS)
    return cudaErrorUnknown;
  return TimeLaunches(
      iters,
      [&] {
        const cublasStatus_t lt =
            backward ? AttentionGemmBackward(ctx.handle, dy.get(), qkv.get(), att.get(), s,
                                             dscore.get(), dqkv.get(), ctx.workspace.get(),
                                             ctx.workspace_bytes, nullptr)
                     : AttentionGemmForward(ctx.handle, qkv.get(), s, att.get(), y.get(),
                                            ctx.workspace.get(), ctx.workspace_bytes, nullptr);
        return lt == CUBLAS_STATUS_SUCCESS ? cudaGetLastError() : cudaErrorUnknown;
      },
      ms);
}

}  // namespace dst::cuda

namespace cuda = dst::cuda;

// Causal attention through batched GEMMs on host arrays (device 0, copied
// back), with dst_cuda_plugin_attention's contract: forward (att [B, H, T, T],
// y [B, T, C]) and backward from dy (dqkv [B, T, 3C] assigned). Returns 0, 1
// when there is no device, 2 on an error (err[cap]).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_attention_gemm(
    const float *qkv, const float *dy, long B, long T, long C, long H, float *att, float *y,
    float *dqkv, char *err, size_t cap) {
  if (!cuda::HasDevice()) return 1;
  const cuda::AttentionDims s{B, T, C, H};
  cudaError_t st = cudaSuccess;
  cuda::DeviceArray<float> d_qkv(qkv, size_t(B * T * 3 * C), &st), d_dy(dy, size_t(B * T * C), &st),
      d_att(nullptr, size_t(s.rows() * T), &st), d_y(nullptr, size_t(B * T * C), &st),
      d_dscore(nullptr, size_t(s.rows() * T), &st), d_dqkv(nullptr, size_t(B * T * 3 * C), &st);
  cuda::GemmContext ctx(&st);
  if (st != cudaSuccess) return cuda::Fail(err, cap, "attention (gemm): device buffers", st);
  cublasStatus_t lt = ctx.handle != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
  if (lt == CUBLAS_STATUS_SUCCESS)
    lt = cuda::AttentionGemmForward(ctx.handle, d_qkv.get(), s, d_att.get(), d_y.get(),
                                    ctx.workspace.get(), ctx.workspace_bytes, nullptr);
  if (lt == CUBLAS_STATUS_SUCCESS)
    lt = cuda::AttentionGemmBackward(ctx.handle, d_dy.get(), d_qkv.get(), d_att.get(), s,
                                     d_dscore.get(), d_dqkv.get(), ctx.workspace.get(),
                                     ctx.workspace_bytes, nullptr);
  if (lt != CUBLAS_STATUS_SUCCESS) {
    if (err != nullptr && cap > 0)
      std::snprintf(err, cap, "attention (gemm): %s", cuda::LtError(lt));
    return 2;
  }
  st = cudaDeviceSynchronize();
  d_att.CopyTo(att);
  d_y.CopyTo(y);
  d_dqkv.CopyTo(dqkv);
  return st == cudaSuccess ? 0 : cuda::Fail(err, cap, "attention (gemm)", st);
}
