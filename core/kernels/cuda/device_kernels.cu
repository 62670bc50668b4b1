// The CUDA kernel backend's device side (core/kernels/cuda/cuda_kernel_table.h):
// every kernel a layer runs, on device pointers, queued on the context's
// stream. The training kernels of cuda_plugin.cu and gpt_kernels.cu are
// launched as they are (kernels.cuh); what the layers need beyond them — the
// element-wise adds, ReLU, bias and column sums, the vocabulary-range
// embedding, the cross-entropy gradient with a vocabulary offset, the
// vocabulary-parallel passes, MSE and the 16-bit stash — is here. GEMMs go
// through cuBLASLt with a plan per shape, made on first use and kept.
// Workspaces (cuBLASLt's, bf16 operand copies, attention's score gradient,
// LayerNorm's partial sums, per-row loss terms) grow on first use and are
// then reused, so a repeated step allocates nothing.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/kernels/cuda/cublaslt.cuh"
#include "core/kernels/cuda/cuda_kernel_table.h"
#include "core/kernels/cuda/entry_times.cuh"
#include "core/kernels/cuda/kernels.cuh"
#include "core/precision/convert.h"

namespace dst::cuda {
namespace {

constexpr float kLayerNormEps = 1e-5f;  // cpu::kLayerNormEps

// ---------------------------------------------------------------- kernels

#define DST_GRID_STRIDE(i, n)                                         \
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < (n); \
       i += long(gridDim.x) * blockDim.x)

__global__ void AddKernel(const float *a, const float *b, long n, float *out) {
  DST_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ void AddInPlaceKernel(const float *x, long n, float *y) {
  DST_GRID_STRIDE(i, n) y[i] += x[i];
}
// y [rows, out] += bias [out] on every row.
__global__ void AddBiasToRowsKernel(const float *bias, long rows, long out, float *y) {
  DST_GRID_STRIDE(i, rows * out) y[i] += bias[i % out];
}
__global__ void FillColumnsKernel(float *x, long rows, long width, long begin, float value) {
  const long cols = width - begin;
  for (long i = long(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * cols;
       i += long(gridDim.x) * blockDim.x)
    x[(i / cols) * width + begin + i % cols] = value;
}
__global__ void ReluForwardKernel(const float *x, long n, float *out) {
  DST_GRID_STRIDE(i, n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void ReluBackwardKernel(const float *dout, const float *x, long n, float *dx) {
  DST_GRID_STRIDE(i, n) dx[i] = x[i] > 0.0f ? dout[i] : 0.0f;
}
// sums [cols] += the column sums of x [rows, cols], rows in order (one thread a column).
__global__ void ColumnSumsKernel(const float *x, long rows, long cols, float *sums) {
  const long col = blockIdx.x * long(blockDim.x) + threadIdx.x;
  if (col >= cols) return;
  float s = 0;
  for (long r = 0; r < rows; ++r) s += x[r * cols + col];
  sums[col] += s;
}

// ---- 16-bit activations (precision/convert.h's conversions)
__device__ inline uint16_t To16(bool bf16, float v) {
  return bf16 ? FloatToBFloat16(v) : FloatToHalf(v);
}
__device__ inline float From16(bool bf16, uint16_t h) {
  return bf16 ? BFloat16ToFloat(h) : HalfToFloat(h);
}
__global__ void RoundTo16Kernel(bool bf16, float *x, long n) {
  DST_GRID_STRIDE(i, n) x[i] = From16(bf16, To16(bf16, x[i]));
}
__global__ void StashTo16Kernel(bool bf16, float *x, long n, uint16_t *stash) {
  DST_GRID_STRIDE(i, n) {
    const uint16_t h = To16(bf16, x[i]);
    stash[i] = h;
    x[i] = From16(bf16, h);
  }
}
__global__ void UnstashFrom16Kernel(bool bf16, const uint16_t *stash, long n, float *x) {
  DST_GRID_STRIDE(i, n) x[i] = From16(bf16, stash[i]);
}
__global__ void ToBf16Kernel(const float *x, long n, __nv_bfloat16 *y) {
  DST_GRID_STRIDE(i, n) y[i] = __float2bfloat16(x[i]);
}

// ---- embeddings
// out [BT, C] = wte rows of the tokens in [first, first + rows), zeros for the others.
__global__ void EmbeddingLookupKernel(const int32_t *tokens, const float *wte, long first,
                                      long rows, long BT, long C, float *out) {
  DST_GRID_STRIDE(i, BT * C) {
    const long row = long(tokens[i / C]) - first;
    out[i] = row >= 0 && row < rows ? wte[row * C + i % C] : 0.0f;
  }
}
// out [rows, C] += wpe of each row's position ((first_row + r) mod T).
__global__ void AddPositionsKernel(const float *wpe, long first_row, long rows, long T, long C,
                                   float *out) {
  DST_GRID_STRIDE(i, rows * C) out[i] += wpe[((first_row + i / C) % T) * C + i % C];
}

// ---- losses (one block a row where a row is reduced)
__global__ void RowMaximaKernel(const float *logits, long V, float *maxima) {
  const float *x = logits + long(blockIdx.x) * V;
  float m = -INFINITY;
  for (long j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, x[j]);
  m = BlockReduce<true>(m);
  if (threadIdx.x == 0) maxima[blockIdx.x] = m;
}
// Row r: m = max over parts of maxima [parts, rows]; x = exp(x - m); sums,
// target_exp (the target's value when in [first, first + V), else 0).
__global__ void ExpAndSumsKernel(float *logits, long rows, long V, const float *maxima, long parts,
                                 const int32_t *targets, long first, float *sums,
                                 float *target_exp) {
  const long r = blockIdx.x;
  float m = maxima[r];
  for (long p = 1; p < parts; ++p) m = fmaxf(m, maxima[p * rows + r]);
  float *x = logits + r * V;
  float s = 0;
  for (long j = threadIdx.x; j < V; j += blockDim.x) {
    const float e = expf(x[j] - m);
    x[j] = e;
    s += e;
  }
  s = BlockReduce<false>(s);  // its barriers make every x[j] visible below
  if (threadIdx.x == 0) {
    const long t = long(targets[r]) - first;
    sums[r] = s;
    target_exp[r] = t >= 0 && t < V ? x[t] : 0.0f;
  }
}
// Row r: x /= sums[r]; nll[r], counted[r] as the CPU's floor of 1e-30.
__global__ void NormalizeAndNllKernel(float *logits, long V, const float *sums,
                                      const float *target_exp, const int32_t *targets, float *nll,
                                      float *counted) {
  const long r = blockIdx.x;
  const float inv = 1.0f / sums[r];
  float *x = logits + r * V;
  for (long j = threadIdx.x; j < V; j += blockDim.x) x[j] *= inv;
  if (threadIdx.x == 0) {
    const bool counts = targets[r] != kIgnoreIndex;
    const float p = target_exp[r] * inv;
    nll[r] = counts ? -logf(fmaxf(p, 1e-30f)) : 0.0f;
    counted[r] = counts ? 1.0f : 0.0f;
  }
}
// The sum of every thread's `sum` in the block (256 threads, a fixed tree),
// returned to every thread; the block is past its last read of the tree when
// this returns, so a second call may reuse it.
__device__ double BlockSum(double sum) {
  __shared__ double sums[256];
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  const double total = sums[0];
  __syncthreads();
  return total;
}
// partial[block] = the block's sum of every thread's `sum` (BlockSum's order).
__device__ void StoreBlockSum(double sum, double *partial) {
  const double total = BlockSum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}
// *loss_sum += the mean of the row terms nll [rows] over counted [rows] (0
// when none counts): one block of 256 threads in a fixed order, the same
// bits run to run.
__global__ void AddMeanOfRowTermsKernel(const float *terms, long rows, double *loss_sum) {
  double nll = 0, n = 0;
  for (long r = threadIdx.x; r < rows; r += blockDim.x) nll += terms[r], n += terms[rows + r];
  const double nll_sum = BlockSum(nll), counted = BlockSum(n);
  if (threadIdx.x == 0 && counted > 0) *loss_sum += nll_sum / counted;
}
// partial[block] = sum of (pred - labels)^2 in double over the block's elements.
__global__ void SquaredErrorKernel(const float *pred, const float *labels, long n,
                                   double *partial) {
  double sum = 0;
  DST_GRID_STRIDE(i, n) {
    const double d = double(pred[i]) - double(labels[i]);
    sum += d * d;
  }
  StoreBlockSum(sum, partial);
}
// partial[block] = this block's share of sum x[i]^2, in double.
__global__ void SquaresKernel(const float *x, long n, double *partial) {
  double sum = 0;
  DST_GRID_STRIDE(i, n) sum += double(x[i]) * double(x[i]);
  StoreBlockSum(sum, partial);
}
// The same over 16-bit values.
__global__ void Squares16Kernel(bool bf16, const uint16_t *x, long n, double *partial) {
  double sum = 0;
  DST_GRID_STRIDE(i, n) {
    const double v = From16(bf16, x[i]);
    sum += v * v;
  }
  StoreBlockSum(sum, partial);
}
__global__ void Narrow16Kernel(bool bf16, const float *src, long n, uint16_t *dst) {
  DST_GRID_STRIDE(i, n) dst[i] = To16(bf16, src[i]);
}
__global__ void AddInto16Kernel(bool bf16, const float *add, long n, uint16_t *acc) {
  DST_GRID_STRIDE(i, n) acc[i] = To16(bf16, From16(bf16, acc[i]) + add[i]);
}
__global__ void AddWide16Kernel(bool bf16, const uint16_t *add, long n, float *acc) {
  DST_GRID_STRIDE(i, n) acc[i] += From16(bf16, add[i]);
}
__global__ void Sum16Kernel(bool bf16, const uint16_t *add, long n, uint16_t *acc) {
  DST_GRID_STRIDE(i, n) acc[i] = To16(bf16, From16(bf16, acc[i]) + From16(bf16, add[i]));
}
__global__ void ScaleKernel(float k, long n, float *x) {
  DST_GRID_STRIDE(i, n) x[i] *= k;
}
__global__ void SgdKernel(const float *grad, long n, DstCudaSgdConstants k, float *param,
                          float *momentum) {
  DST_GRID_STRIDE(i, n)
  math::SgdElement(param[i], grad[i], momentum ? momentum + i : nullptr, k.lr, k.momentum, k.damp,
                   k.weight_decay, k.nesterov != 0, k.first_step != 0);
}
__global__ void MseGradKernel(const float *pred, const float *labels, long n, float k,
                              float *dpred) {
  DST_GRID_STRIDE(i, n) dpred[i] = k * (pred[i] - labels[i]);
}

#undef DST_GRID_STRIDE

// ---------------------------------------------------------------- context

// The workspaces a context keeps (grown on demand, then reused).
enum Workspace {
  kGemm,              // cuBLASLt's
  kOperandA,          // bf16 copies of a GEMM's operands
  kOperandB,          //
  kAttentionScores,   // attention backward's score gradient [B, H, T, T]
  kLayerNormPartial,  // LayerNorm parameter gradients' partial sums
  kRowTerms,          // per-row loss terms [2, rows] / squared-error partials
  kFlashLse,          // the fused attention's row log-sum-exps [B, H, T]
  kFlashY,            // its output recomputed for the backward [B, T, C]
  kFlashDot,          // the backward's rowsum(dy * y) [B, H, T]
  kNumWorkspaces,
};

// A GEMM's plan holds for its transposes, sizes, leading dimensions, compute
// type and the alignment of its pointers.
using PlanKey = std::tuple<bool, bool, long, long, long, long, long, long, int, uint32_t>;

struct Context {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  size_t gemm_workspace_bytes = 0;
  void *workspace[kNumWorkspaces] = {};
  size_t workspace_bytes[kNumWorkspaces] = {};
  std::map<PlanKey, std::unique_ptr<LtPlan>> plans;
  std::vector<float> host_terms;    // per-row loss terms copied back
  std::vector<double> host_double;  // squared-error partials copied back
  bool gemm_attention = false;      // set_attention_gemm
  EntryTimes times;                 // DSTRAIN_CUDA_KERNEL_TIMES
};

Context &Ctx(void *ctx) {
  return *static_cast<Context *>(ctx);
}

// `which` with at least `bytes`; grows (after the stream's earlier users are
// done with the old one) when smaller.
cudaError_t Take(Context &c, Workspace which, size_t bytes, void **out) {
  if (c.workspace_bytes[which] < bytes) {
    cudaError_t e = cudaStreamSynchronize(c.stream);
    if (e == cudaSuccess && c.workspace[which]) e = cudaFree(c.workspace[which]);
    c.workspace[which] = nullptr;
    c.workspace_bytes[which] = 0;
    if (e == cudaSuccess) e = cudaMalloc(&c.workspace[which], bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // an out-of-memory is not sticky
      return e;
    }
    c.workspace_bytes[which] = bytes;
  }
  *out = c.workspace[which];
  return cudaSuccess;
}

template <typename T>
cudaError_t TakeArray(Context &c, Workspace which, size_t count, T **out) {
  void *p = nullptr;
  const cudaError_t e = Take(c, which, count * sizeof(T), &p);
  *out = static_cast<T *>(p);
  return e;
}

int Launched() {
  return cudaGetLastError();
}

// The largest power of two up to 256 that every pointer is a multiple of.
uint32_t Alignment(std::initializer_list<const void *> pointers) {
  uint32_t alignment = 256;
  for (const void *p : pointers)
    while (alignment > 1 && reinterpret_cast<uintptr_t>(p) % alignment != 0) alignment /= 2;
  return alignment;
}

int Blas(cublasStatus_t st) {
  return st == CUBLAS_STATUS_SUCCESS ? 0 : DST_CUDA_BLAS_ERROR + int(st);
}

// Row-major C[m, n] = op(A) op(B) + beta C on the context's stream; with
// DST_CUDA_COMPUTE_BF16 the operands are rounded to bf16 first (fp32
// accumulation and result).
int Gemm(Context &c, bool ta, bool tb, long m, long n, long k, const float *a, long lda,
         const float *b, long ldb, float beta, float *cc, long ldc, int compute) {
  if (m == 0 || n == 0) return 0;
  if (k == 0)  // an empty sum: C = beta C
    return beta != 0.0f ? 0
                        : cudaMemset2DAsync(cc, size_t(ldc) * sizeof(float), 0,
                                            size_t(n) * sizeof(float), size_t(m), c.stream);
  const bool bf16 = compute == DST_CUDA_COMPUTE_BF16;
  const void *da = a, *db = b;
  if (bf16) {
    const long a_count = (ta ? k : m) * lda, b_count = (tb ? n : k) * ldb;
    __nv_bfloat16 *ha = nullptr, *hb = nullptr;
    cudaError_t e = TakeArray(c, kOperandA, size_t(a_count), &ha);
    if (e == cudaSuccess) e = TakeArray(c, kOperandB, size_t(b_count), &hb);
    if (e != cudaSuccess) return e;
    const Launch la = ElementwiseLaunch(a_count), lb = ElementwiseLaunch(b_count);
    ToBf16Kernel<<<la.blocks, la.threads, 0, c.stream>>>(a, a_count, ha);
    ToBf16Kernel<<<lb.blocks, lb.threads, 0, c.stream>>>(b, b_count, hb);
    if (int e2 = Launched()) return e2;
    da = ha;
    db = hb;
  }
  void *workspace = nullptr;
  if (cudaError_t e = Take(c, kGemm, c.gemm_workspace_bytes, &workspace)) return e;
  const ColumnMajorGemm g = FromRowMajor(ta, tb, m, n, k, da, lda, db, ldb, ldc);
  const uint32_t alignment = Alignment({da, db, cc});
  const PlanKey key{ta, tb, m, n, k, lda, ldb, ldc, compute, alignment};
  std::unique_ptr<LtPlan> &plan = c.plans[key];
  if (!plan) {
    plan = std::make_unique<LtPlan>();
    MakePlan(c.lt, g, bf16 ? CUDA_R_16BF : CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F,
             c.gemm_workspace_bytes, plan.get(), alignment);
  }
  return Blas(RunPlan(c.lt, *plan, g, 1.0f, beta, cc, workspace, c.gemm_workspace_bytes, c.stream));
}

// ---------------------------------------------------------------- the table

int ContextCreate(int device, void *stream, void **out) {
  cudaError_t e = cudaSetDevice(device);
  cudaDeviceProp prop{};
  if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) return e;
  auto c = std::make_unique<Context>();
  c->device = device;
  c->stream = static_cast<cudaStream_t>(stream);
  c->gemm_workspace_bytes = size_t(GemmWorkspaceBytes(prop.major));
  if (int st = Blas(cublasLtCreate(&c->lt))) return st;
  *out = c.release();
  return 0;
}

int ContextDestroy(void *ctx) {
  Context *c = static_cast<Context *>(ctx);
  cudaError_t e = cudaSetDevice(c->device);
  if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
  if (c->times.on()) c->times.Print();
  for (void *w : c->workspace)
    if (w) cudaFree(w);
  c->plans.clear();
  if (c->lt) cublasLtDestroy(c->lt);
  delete c;
  return e;
}

const char *ErrorString(int code) {
  if (code >= DST_CUDA_BLAS_ERROR) return LtError(cublasStatus_t(code - DST_CUDA_BLAS_ERROR));
  return cudaGetErrorString(cudaError_t(code));
}

// Every call starts on the context's device (timed with
// DSTRAIN_CUDA_KERNEL_TIMES: entry_times.cuh) with the thread's last error
// clear: an earlier failed call returned its code to its caller but CUDA keeps
// it as the last error too, and this call's launch check would take it for
// its own (a failed Copy made the next ScaleRange "invalid argument").
#define DST_ENTER(ctx)                                   \
  Context &c = Ctx(ctx);                                 \
  cudaGetLastError();                                    \
  if (cudaError_t e = cudaSetDevice(c.device)) return e; \
  const EntryScope entry_scope(c.times, __func__, c.stream)

#define DST_LAUNCH_ELEMENTWISE(kernel, n, ...)                 \
  do {                                                         \
    if ((n) <= 0) return 0;                                    \
    const Launch l = ElementwiseLaunch(n);                     \
    kernel<<<l.blocks, l.threads, 0, c.stream>>>(__VA_ARGS__); \
    return Launched();                                         \
  } while (0)

int CopyRows(void *ctx, const void *src, size_t src_pitch, size_t rows, size_t width, void *dst,
             size_t dst_pitch) {
  DST_ENTER(ctx);
  if (rows == 0 || width == 0) return 0;
  return cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice,
                           c.stream);
}

int Zero(void *ctx, void *dst, size_t bytes) {
  DST_ENTER(ctx);
  return bytes == 0 ? 0 : cudaMemsetAsync(dst, 0, bytes, c.stream);
}

int RoundTo16(void *ctx, int half, float *x, long n) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(RoundTo16Kernel, n, half == DST_CUDA_HALF_BF16, x, n);
}
int StashTo16(void *ctx, int half, float *x, long n, uint16_t *stash) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(StashTo16Kernel, n, half == DST_CUDA_HALF_BF16, x, n, stash);
}
int UnstashFrom16(void *ctx, int half, const uint16_t *stash, long n, float *x) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(UnstashFrom16Kernel, n, half == DST_CUDA_HALF_BF16, stash, n, x);
}

int Add(void *ctx, const float *a, const float *b, long n, float *out) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(AddKernel, n, a, b, n, out);
}
int AddInPlace(void *ctx, const float *x, long n, float *y) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(AddInPlaceKernel, n, x, n, y);
}
int AddBiasToRows(void *ctx, const float *bias, long rows, long out, float *y) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(AddBiasToRowsKernel, rows * out, bias, rows, out, y);
}
int GeluForward(void *ctx, const float *x, long n, float *out) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(GeluForwardKernel, (n + 3) / 4, x, out, n);
}
int GeluBackward(void *ctx, const float *dout, const float *x, long n, float *dx) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(GeluBackwardKernel, (n + 3) / 4, x, dout, dx, n);
}
int ReluForward(void *ctx, const float *x, long n, float *out) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(ReluForwardKernel, n, x, n, out);
}
int ReluBackward(void *ctx, const float *dout, const float *x, long n, float *dx) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(ReluBackwardKernel, n, dout, x, n, dx);
}

// y = x W^T (+ bias), W [out, in].
int LinearForward(void *ctx, const float *x, const float *weight, const float *bias, long rows,
                  long in, long out, float *y, int compute) {
  DST_ENTER(ctx);
  if (int e = Gemm(c, false, true, rows, out, in, x, in, weight, in, 0.0f, y, out, compute))
    return e;
  if (bias == nullptr || rows * out == 0) return 0;
  const Launch l = ElementwiseLaunch(rows * out);
  AddBiasToRowsKernel<<<l.blocks, l.threads, 0, c.stream>>>(bias, rows, out, y);
  return Launched();
}
// dx = dy W.
int LinearInputBackward(void *ctx, const float *dy, const float *weight, long rows, long in,
                        long out, float *dx, int compute) {
  DST_ENTER(ctx);
  return Gemm(c, false, false, rows, in, out, dy, out, weight, in, 0.0f, dx, in, compute);
}
// dweight += dy^T x; dbias += column sums of dy.
int LinearWeightBackward(void *ctx, const float *dy, const float *x, long rows, long in, long out,
                         float *dweight, float *dbias, int compute) {
  DST_ENTER(ctx);
  if (int e = Gemm(c, true, false, out, in, rows, dy, out, x, in, 1.0f, dweight, in, compute))
    return e;
  if (dbias == nullptr || out == 0) return 0;
  const Launch l = ThreadPerColumnLaunch(out, 256);
  ColumnSumsKernel<<<l.blocks, l.threads, 0, c.stream>>>(dy, rows, out, dbias);
  return Launched();
}

int LayerNormForward(void *ctx, const float *x, const float *weight, const float *bias, long rows,
                     long C, float *out, float *mean, float *rstd) {
  DST_ENTER(ctx);
  if (rows == 0) return 0;
  const Launch l = WarpPerRowLaunch(rows, 256);
  LayerNormForwardKernel<<<l.blocks, l.threads, 0, c.stream>>>(x, weight, bias, rows, C, out, mean,
                                                               rstd, kLayerNormEps);
  return Launched();
}

int LayerNormBackward(void *ctx, const float *dout, const float *x, const float *weight,
                      const float *mean, const float *rstd, long rows, long C, float *dx,
                      float *dweight, float *dbias) {
  DST_ENTER(ctx);
  if (rows == 0) return 0;
  if ((dweight == nullptr) != (dbias == nullptr)) return cudaErrorInvalidValue;
  if (dx) {
    const Launch l = WarpPerRowLaunch(rows, 256);
    LayerNormInputGradKernel<<<l.blocks, l.threads, 0, c.stream>>>(dout, x, weight, mean, rstd,
                                                                   rows, C, dx);
    if (int e = Launched()) return e;
  }
  if (dweight == nullptr) return 0;
  float *scratch = nullptr;
  if (cudaError_t e = TakeArray(c, kLayerNormPartial, LayerNormParamGradScratch(rows, C), &scratch))
    return e;
  LaunchLayerNormParamGrad(dout, x, mean, rstd, rows, C, dweight, dbias, scratch, c.stream);
  return Launched();
}

// Whether the batched-GEMM path runs: enabled by the host (its choice for
// the largest shape, which sized `att`) and GPT-2's head layout.
bool GemmAttentionTakes(const Context &c, const AttentionDims &s) {
  return c.gemm_attention && s.plain();
}

int SetAttentionGemm(void *ctx, int enabled) {
  Ctx(ctx).gemm_attention = enabled != 0;
  return 0;
}

// Three ways, in order: batched cuBLASLt GEMMs (attention_gemm.cu) where
// the host enabled them (set_attention_gemm) and the head layout is GPT-2's,
// saving the probabilities in `att`; the fused kernel (online
// softmax, no T x T matrix: flash_attention.cu) where it takes the shape
// (any head layout: GPT's, grouped-query, BLOOM's interleaved, ALiBi): `att`
// is then left alone, and the backward recomputes the forward's y and row
// log-sum-exps into workspaces (no saved probabilities to read); else one
// warp a query row, saving the probabilities in `att` as the CPU layer does.
// The GEMM attention's bf16 scratch for a bf16 layer (qkv and dy copies in
// kOperandA, P and the score gradient in kOperandB); all null for fp32.
cudaError_t TakeAttentionBf16(Context &c, const AttentionDims &s, int compute, bool backward,
                              AttentionBf16 *out) {
  *out = {};
  if (compute != DST_CUDA_COMPUTE_BF16) return cudaSuccess;
  const size_t rows = size_t(s.B * s.T), probabilities = size_t(s.rows() * s.T);
  __nv_bfloat16 *x = nullptr, *p = nullptr;
  cudaError_t e = TakeArray(c, kOperandA, rows * size_t(3 * s.C + (backward ? s.C : 0)), &x);
  if (e == cudaSuccess) e = TakeArray(c, kOperandB, probabilities * (backward ? 2 : 1), &p);
  if (e != cudaSuccess) return e;
  *out = {x, backward ? x + rows * size_t(3 * s.C) : nullptr, p,
          backward ? p + probabilities : nullptr};
  return cudaSuccess;
}

int AttentionForwardDims(void *ctx, const float *qkv, const AttentionDims &s, float *att, float *y,
                         int compute = DST_CUDA_COMPUTE_FP32) {
  DST_ENTER(ctx);
  if (s.rows() == 0) return 0;
  if (GemmAttentionTakes(c, s)) {
    void *workspace = nullptr;
    AttentionBf16 bf16;
    if (cudaError_t e = Take(c, kGemm, c.gemm_workspace_bytes, &workspace)) return e;
    if (cudaError_t e = TakeAttentionBf16(c, s, compute, false, &bf16)) return e;
    if (int e = Blas(AttentionGemmForward(c.lt, qkv, s, att, y, workspace, c.gemm_workspace_bytes,
                                          c.stream, bf16)))
      return e;
    return Launched();
  }
  if (FlashAttentionTakes(s)) {
    float *lse = nullptr;
    if (cudaError_t e = TakeArray(c, kFlashLse, size_t(s.rows()), &lse)) return e;
    return FlashAttentionForward(qkv, s, y, lse, c.stream);
  }
  const Launch l = WarpPerRowLaunch(s.rows(), 128);
  AttentionForwardKernel<<<l.blocks, l.threads, 0, c.stream>>>(qkv, s, att, y);
  return Launched();
}

int AttentionBackwardDims(void *ctx, const float *dy, const float *qkv, const float *att,
                          const AttentionDims &s, float *dqkv,
                          int compute = DST_CUDA_COMPUTE_FP32) {
  DST_ENTER(ctx);
  if (s.rows() == 0) return 0;
  if (GemmAttentionTakes(c, s)) {
    void *workspace = nullptr;
    float *dscore = nullptr;
    AttentionBf16 bf16;
    if (cudaError_t e = Take(c, kGemm, c.gemm_workspace_bytes, &workspace)) return e;
    if (cudaError_t e = TakeArray(c, kAttentionScores, size_t(s.rows() * s.T), &dscore)) return e;
    if (cudaError_t e = TakeAttentionBf16(c, s, compute, true, &bf16)) return e;
    if (int e = Blas(AttentionGemmBackward(c.lt, dy, qkv, att, s, dscore, dqkv, workspace,
                                           c.gemm_workspace_bytes, c.stream, bf16)))
      return e;
    return Launched();
  }
  if (FlashAttentionTakes(s)) {
    float *lse = nullptr, *y = nullptr, *dot = nullptr;
    if (cudaError_t e = TakeArray(c, kFlashLse, size_t(s.rows()), &lse)) return e;
    if (cudaError_t e = TakeArray(c, kFlashY, size_t(s.B * s.T * s.C), &y)) return e;
    if (cudaError_t e = TakeArray(c, kFlashDot, size_t(s.rows()), &dot)) return e;
    if (cudaError_t e = FlashAttentionForward(qkv, s, y, lse, c.stream)) return e;
    return FlashAttentionBackward(qkv, y, lse, dy, s, dqkv, dot, c.stream);
  }
  float *dscore = nullptr;
  if (cudaError_t e = TakeArray(c, kAttentionScores, size_t(s.rows() * s.T), &dscore)) return e;
  const Launch rows = WarpPerRowLaunch(s.rows(), 128), columns = WarpPerRowLaunch(s.kv_rows(), 128);
  AttentionBackwardRowsKernel<<<rows.blocks, rows.threads, 0, c.stream>>>(dy, qkv, att, s, dscore,
                                                                          dqkv);
  AttentionBackwardColumnsKernel<<<columns.blocks, columns.threads, 0, c.stream>>>(dy, qkv, att,
                                                                                   dscore, s, dqkv);
  return Launched();
}

int AttentionForward(void *ctx, const float *qkv, long B, long T, long C, long H, float *att,
                     float *y) {
  return AttentionForwardDims(ctx, qkv, AttentionDims{B, T, C, H}, att, y);
}

int AttentionBackward(void *ctx, const float *dy, const float *qkv, const float *att, long B,
                      long T, long C, long H, float *dqkv) {
  return AttentionBackwardDims(ctx, dy, qkv, att, AttentionDims{B, T, C, H}, dqkv);
}

AttentionDims DimsOf(const DstCudaAttentionShape &s) {
  return {s.B, s.T, s.C, s.H, s.kv_heads, s.interleaved != 0, s.alibi_heads, s.first_head};
}

int AttentionForwardCompute(void *ctx, const float *qkv, const DstCudaAttentionShape *shape,
                            float *att, float *y, int compute) {
  return AttentionForwardDims(ctx, qkv, DimsOf(*shape), att, y, compute);
}
int AttentionBackwardCompute(void *ctx, const float *dy, const float *qkv, const float *att,
                             const DstCudaAttentionShape *shape, float *dqkv, int compute) {
  return AttentionBackwardDims(ctx, dy, qkv, att, DimsOf(*shape), dqkv, compute);
}

// Attention in the general shape (grouped-query, interleaved, ALiBi).
int AttentionForwardGeneral(void *ctx, const float *qkv, const DstCudaAttentionShape *shape,
                            float *att, float *y) {
  return AttentionForwardDims(ctx, qkv, DimsOf(*shape), att, y);
}

int AttentionBackwardGeneral(void *ctx, const float *dy, const float *qkv, const float *att,
                             const DstCudaAttentionShape *shape, float *dqkv) {
  return AttentionBackwardDims(ctx, dy, qkv, att, DimsOf(*shape), dqkv);
}

int RmsNormForward(void *ctx, const float *x, const float *weight, long rows, long C, float eps,
                   float *out, float *rstd) {
  DST_ENTER(ctx);
  if (rows == 0) return 0;
  const Launch l = WarpPerRowLaunch(rows, 256);
  RmsNormForwardKernel<<<l.blocks, l.threads, 0, c.stream>>>(x, weight, rows, C, eps, out, rstd);
  return Launched();
}

int RmsNormBackward(void *ctx, const float *dout, const float *x, const float *weight,
                    const float *rstd, long rows, long C, float *dx, float *dweight) {
  DST_ENTER(ctx);
  if (rows == 0) return 0;
  if (dx) {
    const Launch l = WarpPerRowLaunch(rows, 256);
    RmsNormInputGradKernel<<<l.blocks, l.threads, 0, c.stream>>>(dout, x, weight, rstd, rows, C,
                                                                 dx);
    if (int e = Launched()) return e;
  }
  if (dweight == nullptr) return 0;
  float *scratch = nullptr;
  if (cudaError_t e = TakeArray(c, kLayerNormPartial, RmsNormParamGradScratch(rows, C), &scratch))
    return e;
  LaunchRmsNormParamGrad(dout, x, rstd, rows, C, dweight, scratch, c.stream);
  return Launched();
}

int Rotary(void *ctx, float *qkv, const DstCudaAttentionShape *shape, const DstCudaRope *r,
           int inverse) {
  DST_ENTER(ctx);
  const AttentionDims s = DimsOf(*shape);
  const math::RopeParams rope{r->theta,           r->scaling,          r->factor,
                              r->low_freq_factor, r->high_freq_factor, r->original_max_position};
  DST_LAUNCH_ELEMENTWISE(RotaryKernel, s.B * s.T * (s.H + s.kv()) * (s.hs() / 2), qkv, s, rope,
                         inverse ? -1.0f : 1.0f);
}

int SiluMulForward(void *ctx, const float *gate, const float *up, long n, float *out) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(SiluMulForwardKernel, n, gate, up, n, out);
}

int SiluMulBackward(void *ctx, const float *dout, const float *gate, const float *up, long n,
                    float *dgate, float *dup) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(SiluMulBackwardKernel, n, dout, gate, up, n, dgate, dup);
}

int EmbeddingLookup(void *ctx, const int32_t *tokens, const float *wte, long first, long rows,
                    long B, long T, long C, float *out) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(EmbeddingLookupKernel, B * T * C, tokens, wte, first, rows, B * T, C, out);
}
int AddPositionsToRows(void *ctx, const float *wpe, long first_row, long rows, long T, long C,
                       float *out) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(AddPositionsKernel, rows * C, wpe, first_row, rows, T, C, out);
}
int EmbeddingBackward(void *ctx, const float *dout, const int32_t *tokens, long B, long T, long C,
                      float *dwte, float *dwpe, long first, long rows) {
  DST_ENTER(ctx);
  if (B * T * C == 0) return 0;
  const Launch pos = ElementwiseLaunch(T * C), all = ElementwiseLaunch(B * T * C);
  if (dwpe != nullptr)  // (no learned positions: LLaMA, BLOOM)
    PositionGradKernel<<<pos.blocks, pos.threads, 0, c.stream>>>(dout, B, T, C, dwpe);
  TokenGradKernel<<<all.blocks, all.threads, 0, c.stream>>>(dout, tokens, B * T, C, first, rows,
                                                            dwte);
  return Launched();
}

// The per-row terms nll [rows] | counted [rows] summed on the host (waits
// for the stream): *loss = their mean over the counted rows.
int SumRowTerms(Context &c, const float *terms, long rows, double *loss, long *counted) {
  c.host_terms.resize(size_t(2 * rows));
  cudaError_t e = cudaMemcpyAsync(c.host_terms.data(), terms, size_t(2 * rows) * sizeof(float),
                                  cudaMemcpyDeviceToHost, c.stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(c.stream);
  if (e != cudaSuccess) return e;
  double nll = 0, n = 0;
  for (long r = 0; r < rows; ++r)
    nll += c.host_terms[size_t(r)], n += c.host_terms[size_t(rows + r)];
  *counted = long(n);
  *loss = n > 0 ? nll / n : 0.0;
  return 0;
}

int CrossEntropyForward(void *ctx, float *logits, const int32_t *targets, long rows, long V,
                        double *loss, long *counted) {
  DST_ENTER(ctx);
  *loss = 0;
  *counted = 0;
  if (rows == 0) return 0;
  float *terms = nullptr;
  if (cudaError_t e = TakeArray(c, kRowTerms, size_t(2 * rows), &terms)) return e;
  CrossEntropyForwardKernel<<<unsigned(rows), 256, 0, c.stream>>>(logits, targets, V, logits, terms,
                                                                  terms + rows);
  if (int e = Launched()) return e;
  return SumRowTerms(c, terms, rows, loss, counted);
}

// The row terms `launch` wrote into the context's array, their mean added
// to *loss_sum on the device.
template <typename Launch>
int AddRowTermsMean(Context &c, long rows, double *loss_sum, Launch launch) {
  if (rows == 0) return 0;
  float *terms = nullptr;
  if (cudaError_t e = TakeArray(c, kRowTerms, size_t(2 * rows), &terms)) return e;
  launch(terms);
  if (int e = Launched()) return e;
  AddMeanOfRowTermsKernel<<<1, 256, 0, c.stream>>>(terms, rows, loss_sum);
  return Launched();
}

int CrossEntropyForwardInto(void *ctx, float *logits, const int32_t *targets, long rows, long V,
                            double *loss_sum) {
  DST_ENTER(ctx);
  return AddRowTermsMean(c, rows, loss_sum, [&](float *terms) {
    CrossEntropyForwardKernel<<<unsigned(rows), 256, 0, c.stream>>>(logits, targets, V, logits,
                                                                    terms, terms + rows);
  });
}

int CrossEntropyBackward(void *ctx, const float *probs, const int32_t *targets, long rows, long V,
                         long counted, float grad_scale, float *dlogits, long first) {
  DST_ENTER(ctx);
  const float k = counted > 0 ? grad_scale / float(counted) : 0.0f;
  DST_LAUNCH_ELEMENTWISE(CrossEntropyBackwardKernel, rows * V, probs, targets, rows, V, k, first,
                         dlogits);
}

int RowMaxima(void *ctx, const float *logits, long rows, long V, float *maxima) {
  DST_ENTER(ctx);
  if (rows == 0) return 0;
  RowMaximaKernel<<<unsigned(rows), 256, 0, c.stream>>>(logits, V, maxima);
  return Launched();
}

int ExpAndSums(void *ctx, float *logits, long rows, long V, const float *maxima, long parts,
               const int32_t *targets, long first, float *sums, float *target_exp) {
  DST_ENTER(ctx);
  if (rows == 0) return 0;
  ExpAndSumsKernel<<<unsigned(rows), 256, 0, c.stream>>>(logits, rows, V, maxima, parts, targets,
                                                         first, sums, target_exp);
  return Launched();
}

int NormalizeAndNll(void *ctx, float *logits, long rows, long V, const float *sums,
                    const float *target_exp, const int32_t *targets, double *loss, long *counted) {
  DST_ENTER(ctx);
  *loss = 0;
  *counted = 0;
  if (rows == 0) return 0;
  float *terms = nullptr;
  if (cudaError_t e = TakeArray(c, kRowTerms, size_t(2 * rows), &terms)) return e;
  NormalizeAndNllKernel<<<unsigned(rows), 256, 0, c.stream>>>(logits, V, sums, target_exp, targets,
                                                              terms, terms + rows);
  if (int e = Launched()) return e;
  return SumRowTerms(c, terms, rows, loss, counted);
}

int NormalizeAndNllInto(void *ctx, float *logits, long rows, long V, const float *sums,
                        const float *target_exp, const int32_t *targets, double *loss_sum) {
  DST_ENTER(ctx);
  return AddRowTermsMean(c, rows, loss_sum, [&](float *terms) {
    NormalizeAndNllKernel<<<unsigned(rows), 256, 0, c.stream>>>(logits, V, sums, target_exp,
                                                                targets, terms, terms + rows);
  });
}

// The per-block partial sums `launch` wrote into `partial` [blocks], summed
// on the host in block order (the same bits run to run).
template <typename LaunchFn>
int SumPartials(Context &c, long n, double *sum, LaunchFn launch) {
  *sum = 0;
  if (n == 0) return 0;
  const Launch l = ElementwiseLaunch(n);
  double *partial = nullptr;
  if (cudaError_t e = TakeArray(c, kRowTerms, size_t(l.blocks), &partial)) return e;
  launch(l.blocks, partial);
  if (int e = Launched()) return e;
  c.host_double.resize(size_t(l.blocks));
  cudaError_t e = cudaMemcpyAsync(c.host_double.data(), partial, size_t(l.blocks) * sizeof(double),
                                  cudaMemcpyDeviceToHost, c.stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(c.stream);
  if (e != cudaSuccess) return e;
  for (double p : c.host_double) *sum += p;
  return 0;
}

int MseForward(void *ctx, const float *pred, const float *labels, long n, double *loss) {
  DST_ENTER(ctx);
  double sum = 0;
  const int e = SumPartials(c, n, &sum, [&](unsigned blocks, double *partial) {
    SquaredErrorKernel<<<blocks, 256, 0, c.stream>>>(pred, labels, n, partial);
  });
  *loss = e == 0 && n > 0 ? sum / double(n) : 0.0;
  return e;
}

int MseBackward(void *ctx, const float *pred, const float *labels, long n, float grad_scale,
                float *dpred, long mean_over) {
  DST_ENTER(ctx);
  const float k = 2.0f * grad_scale / float(mean_over > 0 ? mean_over : n);
  DST_LAUNCH_ELEMENTWISE(MseGradKernel, n, pred, labels, n, k, dpred);
}

// ---- the step backend

int Scale(void *ctx, float k, long n, float *x) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(ScaleKernel, n, k, n, x);
}

int SumOfSquares(void *ctx, const float *x, long n, double *sum) {
  DST_ENTER(ctx);
  return SumPartials(c, n, sum, [&](unsigned blocks, double *partial) {
    SquaresKernel<<<blocks, 256, 0, c.stream>>>(x, n, partial);
  });
}

int SumOfSquares16(void *ctx, int half, const uint16_t *x, long n, double *sum) {
  DST_ENTER(ctx);
  const bool bf16 = half == DST_CUDA_HALF_BF16;
  return SumPartials(c, n, sum, [&](unsigned blocks, double *partial) {
    Squares16Kernel<<<blocks, 256, 0, c.stream>>>(bf16, x, n, partial);
  });
}

int Narrow16(void *ctx, int half, const float *src, long n, uint16_t *dst) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(Narrow16Kernel, n, half == DST_CUDA_HALF_BF16, src, n, dst);
}
int AddInto16(void *ctx, int half, const float *add, long n, uint16_t *acc) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(AddInto16Kernel, n, half == DST_CUDA_HALF_BF16, add, n, acc);
}
int AddWide16(void *ctx, int half, const uint16_t *add, long n, float *acc) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(AddWide16Kernel, n, half == DST_CUDA_HALF_BF16, add, n, acc);
}
int Sum16(void *ctx, int half, const uint16_t *add, long n, uint16_t *acc) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(Sum16Kernel, n, half == DST_CUDA_HALF_BF16, add, n, acc);
}

int Adam(void *ctx, float *param, const float *grad, float *exp_avg, float *exp_avg_sq, long n,
         const DstCudaAdamConstants *k, uint16_t *half_out, int half) {
  DST_ENTER(ctx);
  const math::AdamConstants constants{k->b1,        k->omb1,  k->b2, k->omb2, k->bias2_sqrt,
                                      k->step_size, k->decay, k->l2, k->eps,  k->grad_mul};
  DST_LAUNCH_ELEMENTWISE(AdamKernel, n, param, grad, exp_avg, exp_avg_sq, n, constants, half_out,
                         half == DST_CUDA_HALF_BF16);
}

int Sgd(void *ctx, const float *grad, long n, const DstCudaSgdConstants *k, float *param,
        float *momentum) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(SgdKernel, n, grad, n, *k, param, momentum);
}

int FillColumns(void *ctx, float *x, long rows, long width, long begin, float value) {
  DST_ENTER(ctx);
  DST_LAUNCH_ELEMENTWISE(FillColumnsKernel, rows * (width - begin), x, rows, width, begin, value);
}

#undef DST_LAUNCH_ELEMENTWISE
#undef DST_ENTER

}  // namespace
}  // namespace dst::cuda

// Fills the kernel backend's table (core/device/cuda_kernels.cc loads it).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_kernels(
    DstCudaKernelTable *t) {
  namespace k = dst::cuda;
  if (t == nullptr || t->size < sizeof(DstCudaKernelTable)) return 1;
  *t = DstCudaKernelTable{};
  t->size = sizeof(DstCudaKernelTable);
  t->context_create = k::ContextCreate;
  t->context_destroy = k::ContextDestroy;
  t->error_string = k::ErrorString;
  t->copy_rows = k::CopyRows;
  t->zero = k::Zero;
  t->round_to_16 = k::RoundTo16;
  t->stash_to_16 = k::StashTo16;
  t->unstash_from_16 = k::UnstashFrom16;
  t->add = k::Add;
  t->add_in_place = k::AddInPlace;
  t->add_bias_to_rows = k::AddBiasToRows;
  t->gelu_forward = k::GeluForward;
  t->gelu_backward = k::GeluBackward;
  t->relu_forward = k::ReluForward;
  t->relu_backward = k::ReluBackward;
  t->linear_forward = k::LinearForward;
  t->linear_input_backward = k::LinearInputBackward;
  t->linear_weight_backward = k::LinearWeightBackward;
  t->layernorm_forward = k::LayerNormForward;
  t->layernorm_backward = k::LayerNormBackward;
  t->attention_forward = k::AttentionForward;
  t->attention_backward = k::AttentionBackward;
  t->embedding_lookup = k::EmbeddingLookup;
  t->add_positions_to_rows = k::AddPositionsToRows;
  t->embedding_backward = k::EmbeddingBackward;
  t->cross_entropy_forward = k::CrossEntropyForward;
  t->cross_entropy_backward = k::CrossEntropyBackward;
  t->row_maxima = k::RowMaxima;
  t->exp_and_sums = k::ExpAndSums;
  t->normalize_and_nll = k::NormalizeAndNll;
  t->mse_forward = k::MseForward;
  t->mse_backward = k::MseBackward;
  t->scale = k::Scale;
  t->sum_of_squares = k::SumOfSquares;
  t->adam = k::Adam;
  t->sgd = k::Sgd;
  t->narrow_16 = k::Narrow16;
  t->add_into_16 = k::AddInto16;
  t->add_wide_16 = k::AddWide16;
  t->sum_16 = k::Sum16;
  t->sum_of_squares_16 = k::SumOfSquares16;
  t->fill_columns = k::FillColumns;
  t->rmsnorm_forward = k::RmsNormForward;
  t->rmsnorm_backward = k::RmsNormBackward;
  t->rotary = k::Rotary;
  t->silu_mul_forward = k::SiluMulForward;
  t->silu_mul_backward = k::SiluMulBackward;
  t->attention_forward_general = k::AttentionForwardGeneral;
  t->attention_backward_general = k::AttentionBackwardGeneral;
  t->cross_entropy_forward_into = k::CrossEntropyForwardInto;
  t->normalize_and_nll_into = k::NormalizeAndNllInto;
  t->set_attention_gemm = k::SetAttentionGemm;
  t->attention_forward_compute = k::AttentionForwardCompute;
  t->attention_backward_compute = k::AttentionBackwardCompute;
  return 0;
}
