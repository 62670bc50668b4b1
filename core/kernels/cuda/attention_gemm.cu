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
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "core/kernels/cuda/cublaslt.cuh"
#include "core/kernels/cuda/plugin_support.cuh"

namespace dst::cuda {

namespace {

// P in place of S, one warp a row of [B, H, T, T]: softmax over keys 0..t of
// the row's query t, zeros after; p16 (when given) gets P rounded to bf16.
__global__ void CausalSoftmaxRowsKernel(float *att, long rows, long T, __nv_bfloat16 *p16) {
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
  for (long j = lane; j < T; j += kWarp) {
    a[j] = j <= t ? expf(a[j] - maxv) * inv : 0.0f;
    if (p16) p16[row * T + j] = __float2bfloat16(a[j]);
  }
}

// dS in place of dP, one warp a row: dS = P (dP - <P, dP>) over keys 0..t,
// zeros after; with ds16 given, dS goes there rounded to bf16 instead, and
// p16 gets P rounded to bf16 (the bf16 products' operands).
__global__ void SoftmaxBackwardRowsKernel(const float *att, float *dscore, long rows, long T,
                                          __nv_bfloat16 *ds16, __nv_bfloat16 *p16) {
  const long row = blockIdx.x * long(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const long t = row % T;
  const float *p = att + row * T;
  float *d = dscore + row * T;
  float dot = 0.0f;
  for (long j = lane; j <= t; j += kWarp) dot += p[j] * d[j];
  dot = WarpSum(dot);
  for (long j = lane; j < T; j += kWarp) {
    const float ds = j <= t ? p[j] * (d[j] - dot) : 0.0f;
    if (ds16) {
      ds16[row * T + j] = __float2bfloat16(ds);
      p16[row * T + j] = __float2bfloat16(p[j]);
    } else {
      d[j] = ds;
    }
  }
}

__global__ void RoundToBf16Kernel(const float *x, long n, __nv_bfloat16 *y) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16(x[i]);
}

// y = x rounded to bf16, n elements, on `stream`.
void RoundToBf16(const float *x, long n, __nv_bfloat16 *y, cudaStream_t stream) {
  const Launch l = ElementwiseLaunch(n);
  RoundToBf16Kernel<<<l.blocks, l.threads, 0, stream>>>(x, n, y);
}

// One of the attention's products, planned once and run for each batch row.
class HeadProduct {
 public:
  // Row-major C = op(A) op(B), strided over the H heads; the pointers given
  // are batch row 0's, `per_b` the elements each moves by from one b to the
  // next. The operands are fp32, or bf16 (`bf16`: both; fp32 accumulation
  // and C either way).
  struct Operand {
    const void *data;
    long ld, head_stride, per_b;
  };
  HeadProduct(cublasLtHandle_t handle, const AttentionDims &s, bool trans_a, bool trans_b, long m,
              long n, long k, Operand a, Operand b, float *c, long ldc, long c_head_stride,
              long c_per_b, size_t workspace_bytes, bool bf16 = false)
      : element_(bf16 ? 2 : 4),
        handle_(handle),
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
    MakePlan(handle, Layout(0), bf16 ? CUDA_R_16BF : CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F,
             workspace_bytes, &plan_, Alignment());
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
  // The bytes every matrix the plan runs on starts at a multiple of (up to
  // cuBLASLt's assumed 256): the pointers, and every step between them (a
  // head, a batch row, a leading dimension), so that a head's or a batch
  // row's matrix inside the layer's buffers keeps it.
  uint32_t Alignment() const {
    uint32_t alignment = 256;
    auto keep = [&alignment](uintptr_t bytes) {
      while (alignment > 1 && bytes % alignment != 0) alignment /= 2;
    };
    for (const Operand *o : {&a_, &b_}) {
      keep(reinterpret_cast<uintptr_t>(o->data));
      for (long step : {o->ld, o->head_stride, o->per_b}) keep(uintptr_t(step) * element_);
    }
    keep(reinterpret_cast<uintptr_t>(c_));
    for (long step : {ldc_, c_head_stride_, c_per_b_}) keep(uintptr_t(step) * sizeof(float));
    return alignment;
  }
  const void *At(const Operand &o, long b) const {
    return static_cast<const char *>(o.data) + size_t(b * o.per_b) * element_;
  }
  ColumnMajorGemm Layout(long b) const {
    return BatchedFromRowMajor(trans_a_, trans_b_, m_, n_, k_, At(a_, b), a_.ld, a_.head_stride,
                               At(b_, b), b_.ld, b_.head_stride, ldc_, c_head_stride_, int(s_.H));
  }

  size_t element_;  // an operand's bytes
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
// With `bf16` scratch (qkv16 [B, T, 3C] then p16 [B, H, T, T]) the products
// read bf16 copies of q, k, v and P, as the CPU's bf16 attention does.
cublasStatus_t AttentionGemmForward(cublasLtHandle_t handle, const float *qkv,
                                    const AttentionDims &s, float *att, float *y, void *workspace,
                                    size_t workspace_bytes, cudaStream_t stream,
                                    const AttentionBf16 &bf16) {
  const long T = s.T, C = s.C, hs = s.hs();
  const bool half = bf16.qkv != nullptr;
  const void *x = qkv;
  if (half) {
    RoundToBf16(qkv, s.B * T * 3 * C, bf16.qkv, stream);
    x = bf16.qkv;
  }
  const size_t e = half ? 2 : 4;
  auto offset = [&](const void *base, long elements) {
    return static_cast<const void *>(static_cast<const char *>(base) + size_t(elements) * e);
  };
  const HeadProduct::Operand q{x, 3 * C, hs, T * 3 * C}, k{offset(x, C), 3 * C, hs, T * 3 * C},
      v{offset(x, 2 * C), 3 * C, hs, T * 3 * C},
      p{half ? static_cast<const void *>(bf16.p) : att, T, T * T, s.H * T * T};
  const HeadProduct scores(handle, s, false, true, T, T, hs, q, k, att, T, T * T, s.H * T * T,
                           workspace_bytes, half);
  const HeadProduct out(handle, s, false, false, T, hs, T, p, v, y, C, hs, T * C, workspace_bytes,
                        half);
  cublasStatus_t st = scores.Run(1.0f / sqrtf(float(hs)), workspace, workspace_bytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const Launch l = WarpPerRowLaunch(s.rows(), 256);
  CausalSoftmaxRowsKernel<<<l.blocks, l.threads, 0, stream>>>(att, s.rows(), T, bf16.p);
  return out.Run(1.0f, workspace, workspace_bytes, stream);
}

// dqkv [B, T, 3C] (assigned) from dy [B, T, C], qkv and the forward's att;
// dscore is scratch [B, H, T, T]. With `bf16` scratch (qkv16, dy16 [B, T, C],
// p16, ds16 [B, H, T, T]) the products read bf16 copies of q, k, v, dy, P
// and the score gradient, as the CPU's bf16 attention does.
cublasStatus_t AttentionGemmBackward(cublasLtHandle_t handle, const float *dy, const float *qkv,
                                     const float *att, const AttentionDims &s, float *dscore,
                                     float *dqkv, void *workspace, size_t workspace_bytes,
                                     cudaStream_t stream, const AttentionBf16 &bf16) {
  const long T = s.T, C = s.C, hs = s.hs();
  const float scale = 1.0f / sqrtf(float(hs));
  const bool half = bf16.qkv != nullptr;
  const void *x = qkv, *g16 = dy;
  if (half) {
    RoundToBf16(qkv, s.B * T * 3 * C, bf16.qkv, stream);
    RoundToBf16(dy, s.B * T * C, bf16.dy, stream);
    x = bf16.qkv;
    g16 = bf16.dy;
  }
  const size_t e = half ? 2 : 4;
  auto offset = [&](const void *base, long elements) {
    return static_cast<const void *>(static_cast<const char *>(base) + size_t(elements) * e);
  };
  const HeadProduct::Operand q{x, 3 * C, hs, T * 3 * C}, k{offset(x, C), 3 * C, hs, T * 3 * C},
      v{offset(x, 2 * C), 3 * C, hs, T * 3 * C}, g{g16, C, hs, T * C},
      p{half ? static_cast<const void *>(bf16.p) : att, T, T * T, s.H * T * T},
      ds{half ? static_cast<const void *>(bf16.ds) : dscore, T, T * T, s.H * T * T};
  const HeadProduct dp(handle, s, false, true, T, T, hs, g, v, dscore, T, T * T, s.H * T * T,
                       workspace_bytes, half);
  const HeadProduct dq(handle, s, false, false, T, hs, T, ds, k, dqkv, 3 * C, hs, T * 3 * C,
                       workspace_bytes, half);
  const HeadProduct dk(handle, s, true, false, T, hs, T, ds, q, dqkv + C, 3 * C, hs, T * 3 * C,
                       workspace_bytes, half);
  const HeadProduct dv(handle, s, true, false, T, hs, T, p, g, dqkv + 2 * C, 3 * C, hs, T * 3 * C,
                       workspace_bytes, half);
  cublasStatus_t st = dp.Run(1.0f, workspace, workspace_bytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const Launch l = WarpPerRowLaunch(s.rows(), 256);
  SoftmaxBackwardRowsKernel<<<l.blocks, l.threads, 0, stream>>>(att, dscore, s.rows(), T, bf16.ds,
                                                                bf16.p);
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
