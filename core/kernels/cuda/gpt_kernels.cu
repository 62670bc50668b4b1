// The GPT's own CUDA kernels, each the CPU kernel's math (cpu/embedding.h,
// cpu/loss.h, cpu/attention.h, storage.h's SumOfSquares) written for the
// device, and their test entry points (host arrays in and out, device 0):
//   embedding    forward (wte[token] + wpe[t]) and backward (dwpe summed over
//                the batch in a fixed order; dwte scattered with atomics, so
//                its last bits may differ from run to run where tokens repeat);
//   cross-entropy  softmax with the loss per row (one block a row), and the
//                gradient (p - onehot) * grad_scale / counted; and fused: the
//                row's max and sum in one online pass, only the gradient
//                written (no probabilities in memory: 2.4x less traffic);
//   attention    causal, one warp a query row: scores, softmax and att v in
//                one pass (the probabilities saved [B, H, T, T], as on the CPU);
//                backward in two passes without atomics (rows: dq and the
//                score gradient; columns: dk and dv);
//   grad stats   the sum of squares in double and a count of non-finite
//                values over a flat range (the gradient norm and the fp16
//                overflow check), per-block partials summed in order.
// The fused attention (no T x T matrix) is flash_attention.cu. Tested on an
// H200 (2026-11-26).
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/kernels/cuda/kernels.cuh"

namespace dst::cuda {

// ---------------------------------------------------------------- embedding

// out[bt, c] = wte[tokens[bt], c] + wpe[bt % T, c]; out [BT, C].
__global__ void EmbeddingForwardKernel(const int32_t *tokens, const float *wte, const float *wpe,
                                       long BT, long T, long C, float *out) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < BT * C;
       i += long(gridDim.x) * blockDim.x) {
    const long bt = i / C, c = i % C;
    out[i] = wte[long(tokens[bt]) * C + c] + wpe[(bt % T) * C + c];
  }
}

// dwpe[t, c] += sum over b of dout[b, t, c] (one thread an element, b in order).
__global__ void PositionGradKernel(const float *dout, long B, long T, long C, float *dwpe) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < T * C;
       i += long(gridDim.x) * blockDim.x) {
    const long t = i / C, c = i % C;
    float sum = 0;
    for (long b = 0; b < B; ++b) sum += dout[(b * T + t) * C + c];
    dwpe[i] += sum;
  }
}

// dwte[tokens[bt] - first, c] += dout[bt, c] for the tokens among wte's rows
// [first, first + rows) (a vocabulary-parallel rank's).
__global__ void TokenGradKernel(const float *dout, const int32_t *tokens, long BT, long C,
                                long first, long rows, float *dwte) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < BT * C;
       i += long(gridDim.x) * blockDim.x) {
    const long row = long(tokens[i / C]) - first;
    if (row >= 0 && row < rows) atomicAdd(&dwte[row * C + i % C], dout[i]);
  }
}

// ---------------------------------------------------------------- cross-entropy

// One block a row of logits [rows, V]: probs = softmax(row); nll[row] =
// -log(max(p[target], 1e-30)) and counted[row] = 1, or both 0 when the
// target is ignored.
__global__ void CrossEntropyForwardKernel(const float *logits, const int32_t *targets, long V,
                                          float *probs, float *nll, float *counted) {
  const long row = blockIdx.x;
  const float *x = logits + row * V;
  float *p = probs + row * V;
  float maxv = -INFINITY;
  for (long j = threadIdx.x; j < V; j += blockDim.x) maxv = fmaxf(maxv, x[j]);
  maxv = BlockReduce<true>(maxv);
  float sum = 0;
  for (long j = threadIdx.x; j < V; j += blockDim.x) {
    const float e = expf(x[j] - maxv);
    p[j] = e;
    sum += e;
  }
  const float inv = 1.0f / BlockReduce<false>(sum);
  for (long j = threadIdx.x; j < V; j += blockDim.x) p[j] *= inv;
  __syncthreads();
  if (threadIdx.x == 0) {
    const int32_t t = targets[row];
    const bool counts = t != kIgnoreIndex;
    nll[row] = counts ? -logf(fmaxf(p[t], 1e-30f)) : 0.0f;
    counted[row] = counts ? 1.0f : 0.0f;
  }
}

// dlogits (assigns) [rows, V] = (p - onehot(target - first)) * k, zero for
// ignored rows (first: a vocabulary-parallel rank's first column).
__global__ void CrossEntropyBackwardKernel(const float *probs, const int32_t *targets, long rows,
                                           long V, float k, long first, float *dlogits) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < rows * V;
       i += long(gridDim.x) * blockDim.x) {
    const int32_t t = targets[i / V];
    const long j = i % V;
    dlogits[i] = t == kIgnoreIndex ? 0.0f : (probs[i] - (j == long(t) - first ? 1.0f : 0.0f)) * k;
  }
}

// ---- fused: the loss and the gradient without the probabilities in memory

// (m, s) <- the running max and sum of exp(x - max) of two sets together.
__device__ inline void CombineMaxSum(float &m, float &s, float m2, float s2) {
  const float both = fmaxf(m, m2);
  if (both == -INFINITY) return;  // both sets empty
  s = s * expf(m - both) + s2 * expf(m2 - both);
  m = both;
}

// The block's (max, sum of exp(x - max)), in every thread.
__device__ void BlockMaxSum(float &m, float &s) {
  __shared__ float maxes[kWarp], sums[kWarp];
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    CombineMaxSum(m, s, __shfl_xor_sync(0xffffffffu, m, offset),
                  __shfl_xor_sync(0xffffffffu, s, offset));
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) maxes[warp] = m, sums[warp] = s;
  __syncthreads();
  const int warps = int(blockDim.x) / kWarp;
  m = lane < warps ? maxes[lane] : -INFINITY;
  s = lane < warps ? sums[lane] : 0.0f;
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    CombineMaxSum(m, s, __shfl_xor_sync(0xffffffffu, m, offset),
                  __shfl_xor_sync(0xffffffffu, s, offset));
}

// *count = the targets that are not ignored (an integer: atomics are exact).
__global__ void CountTargetsKernel(const int32_t *targets, long rows, int *count) {
  int mine = 0;
  for (long r = blockIdx.x * long(blockDim.x) + threadIdx.x; r < rows;
       r += long(gridDim.x) * blockDim.x)
    mine += targets[r] != kIgnoreIndex;
  if (mine > 0) atomicAdd(count, mine);
}

// One block a row of logits [rows, V]: one pass for the max and the sum
// together (each thread rescales its running sum when its max grows), then
// nll[row] = min(lse - x[target], -log 1e-30) (the CPU's clamp) and
// dlogits = (exp(x - lse) - onehot(target)) * grad_scale / *count, both 0 for
// an ignored row. Reads the logits twice, writes dlogits once.
__global__ void CrossEntropyFusedKernel(const float *logits, const int32_t *targets, long V,
                                        const int *count, float grad_scale, float *nll,
                                        float *dlogits) {
  const long row = blockIdx.x;
  const float *x = logits + row * V;
  float *dx = dlogits + row * V;
  float m = -INFINITY, sum = 0.0f;
  for (long j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = x[j];
    if (v > m) {
      sum = sum * expf(m - v) + 1.0f;
      m = v;
    } else if (m != -INFINITY) {  // (an all -inf prefix adds nothing)
      sum += expf(v - m);
    }
  }
  BlockMaxSum(m, sum);
  const float lse = m + logf(sum);
  const int32_t t = targets[row];
  const bool counts = t != kIgnoreIndex;
  const float k = counts && *count > 0 ? grad_scale / float(*count) : 0.0f;
  for (long j = threadIdx.x; j < V; j += blockDim.x)
    dx[j] = (expf(x[j] - lse) - (j == t ? 1.0f : 0.0f)) * k;
  if (threadIdx.x == 0) nll[row] = counts ? fminf(lse - x[t], 69.07755279f) : 0.0f;
}

// Launches the fused cross-entropy: count (an int on the device) then nll,
// dlogits.
void LaunchCrossEntropyFused(const float *logits, const int32_t *targets, long rows, long V,
                             float grad_scale, int *count, float *nll, float *dlogits) {
  const Launch l = ElementwiseLaunch(rows);
  cudaMemsetAsync(count, 0, sizeof(int));
  CountTargetsKernel<<<l.blocks, l.threads>>>(targets, rows, count);
  CrossEntropyFusedKernel<<<int(rows), 1024>>>(logits, targets, V, count, grad_scale, nll, dlogits);
}

// ---------------------------------------------------------------- attention

__device__ float Dot(const float *a, const float *b, long n, int lane) {
  float s = 0;
  for (long d = lane; d < n; d += kWarp) s += a[d] * b[d];
  return WarpSum(s);
}

// One warp a query row (b, h, t): att[b, h, t, :] = causal softmax of q k^T
// scaled by 1/sqrt(hs) (+ ALiBi: slope x key position; zeros after t),
// y[b, t, h] = att row @ v.
__global__ void AttentionForwardKernel(const float *qkv, AttentionDims s, float *att, float *y) {
  const long row = blockIdx.x * long(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= s.rows()) return;
  const long t = row % s.T, bh = row / s.T, h = bh % s.H, b = bh / s.H, hs = s.hs();
  const float scale = 1.0f / sqrtf(float(hs));
  const float slope = s.alibi_heads > 0 ? math::AlibiSlope(s.first_head + h, s.alibi_heads) : 0.0f;
  const float *q = qkv + s.At(b, t, h, 0);
  float *a = att + row * s.T;
  float maxv = -INFINITY;
  for (long j = 0; j <= t; ++j) {  // the warp computes each score together
    float score = Dot(q, qkv + s.At(b, j, h, 1), hs, lane) * scale;
    if (slope != 0.0f) score += slope * float(j);
    if (lane == 0) a[j] = score;
    maxv = fmaxf(maxv, score);
  }
  __syncwarp();
  float sum = 0;
  for (long j = lane; j <= t; j += kWarp) {
    const float e = expf(a[j] - maxv);
    a[j] = e;
    sum += e;
  }
  const float inv = 1.0f / WarpSum(sum);
  for (long j = lane; j < s.T; j += kWarp) a[j] = j <= t ? a[j] * inv : 0.0f;
  __syncwarp();
  float *out = y + (b * s.T + t) * s.C + h * hs;
  for (long d = lane; d < hs; d += kWarp) {
    float acc = 0;
    for (long j = 0; j <= t; ++j) acc += a[j] * qkv[s.At(b, j, h, 2) + d];
    out[d] = acc;
  }
}

// Backward, rows: for query row (b, h, t), ds[j] = a[j] (da[j] - <a, da>)
// with da[j] = dy_t . v_j (saved into dscore [B, H, T, T], zeros after t) and
// dq_t = scale * sum_j ds[j] k_j.
__global__ void AttentionBackwardRowsKernel(const float *dy, const float *qkv, const float *att,
                                            AttentionDims s, float *dscore, float *dqkv) {
  const long row = blockIdx.x * long(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= s.rows()) return;
  const long t = row % s.T, bh = row / s.T, h = bh % s.H, b = bh / s.H, hs = s.hs();
  const float scale = 1.0f / sqrtf(float(hs));
  const float *g = dy + (b * s.T + t) * s.C + h * hs;
  const float *a = att + row * s.T;
  float *ds = dscore + row * s.T;
  float dot = 0;
  for (long j = 0; j <= t; ++j) {
    const float da = Dot(g, qkv + s.At(b, j, h, 2), hs, lane);
    if (lane == 0) ds[j] = da;
    dot += a[j] * da;
  }
  __syncwarp();
  for (long j = lane; j < s.T; j += kWarp) ds[j] = j <= t ? a[j] * (ds[j] - dot) : 0.0f;
  __syncwarp();
  float *dq = dqkv + s.At(b, t, h, 0);
  for (long d = lane; d < hs; d += kWarp) {
    float acc = 0;
    for (long j = 0; j <= t; ++j) acc += ds[j] * qkv[s.At(b, j, h, 1) + d];
    dq[d] = acc * scale;
  }
}

// Backward, columns: for key row (b, g, j) of key/value head g,
// dk_j = scale * sum over g's query heads h and t >= j of ds[h, t, j] q_{h,t},
// dv_j = the same sum of att[h, t, j] dy_{h,t} (grouped-query heads add up in
// head order). One warp a key row: WarpPerRowLaunch(s.kv_rows(), 128).
__global__ void AttentionBackwardColumnsKernel(const float *dy, const float *qkv, const float *att,
                                               const float *dscore, AttentionDims s, float *dqkv) {
  const long col = blockIdx.x * long(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (col >= s.kv_rows()) return;
  const long j = col % s.T, bg = col / s.T, g = bg % s.kv(), b = bg / s.kv(), hs = s.hs();
  const long group = s.H / s.kv();
  const float scale = 1.0f / sqrtf(float(hs));
  float *dk = dqkv + s.KvAt(b, j, g, 1);
  float *dv = dqkv + s.KvAt(b, j, g, 2);
  for (long d = lane; d < hs; d += kWarp) {
    float k_acc = 0, v_acc = 0;
    for (long h = g * group; h < (g + 1) * group; ++h) {
      const long bh = b * s.H + h;
      for (long t = j; t < s.T; ++t) {
        const long at = (bh * s.T + t) * s.T + j;
        k_acc += dscore[at] * qkv[s.At(b, t, h, 0) + d];
        v_acc += att[at] * dy[(b * s.T + t) * s.C + h * hs + d];
      }
    }
    dk[d] = k_acc * scale;
    dv[d] = v_acc;
  }
}

// ---------------------------------------------------------------- gradient statistics

// partial[block] = the sum of x[i]^2 (in double) over the block's elements;
// *nonfinite += the count of values that are not finite.
__global__ void GradStatsKernel(const float *x, long n, double *partial, int *nonfinite) {
  __shared__ double sums[256];
  double sum = 0;
  int bad = 0;
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x) {
    const float v = x[i];
    if (!isfinite(v)) ++bad;
    sum += double(v) * double(v);
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {  // a fixed tree
    if (int(threadIdx.x) < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
  if (bad > 0) atomicAdd(nonfinite, bad);
}

// ---------------------------------------------------------------- bench

namespace {

// t[i] = a pseudo-random token in [0, V).
__global__ void TokensKernel(int32_t *t, long n, long V) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    t[i] = int32_t((unsigned(i) * 2654435761u >> 7) % unsigned(V));
}

cudaError_t RandomTokens(int32_t *t, long n, long V) {
  const Launch l = ElementwiseLaunch(n);
  TokensKernel<<<l.blocks, l.threads>>>(t, n, V);
  return cudaGetLastError();
}

cudaError_t BenchAttention(bool backward, const BenchDims &d, int iters, double *ms) {
  const AttentionDims s{d.B, d.T, d.C, d.H};
  const long BT = d.B * d.T;
  cudaError_t st = cudaSuccess;
  DeviceArray<float> qkv(nullptr, size_t(BT * 3 * d.C), &st), dy(nullptr, size_t(BT * d.C), &st),
      att(nullptr, size_t(s.rows() * d.T), &st), y(nullptr, size_t(BT * d.C), &st),
      dscore(nullptr, backward ? size_t(s.rows() * d.T) : 1, &st),
      dqkv(nullptr, backward ? size_t(BT * 3 * d.C) : 1, &st);
  if (st == cudaSuccess) st = FillRandom(qkv.get(), BT * 3 * d.C, 1u);
  if (st == cudaSuccess) st = FillRandom(dy.get(), BT * d.C, 2u);
  const Launch l = WarpPerRowLaunch(s.rows(), 128);
  if (st == cudaSuccess)  // the probabilities the backward reads
    AttentionForwardKernel<<<l.blocks, l.threads>>>(qkv.get(), s, att.get(), y.get());
  if (st != cudaSuccess) return st;
  return TimeLaunches(
      iters,
      [&] {
        if (!backward) {
          AttentionForwardKernel<<<l.blocks, l.threads>>>(qkv.get(), s, att.get(), y.get());
        } else {
          AttentionBackwardRowsKernel<<<l.blocks, l.threads>>>(dy.get(), qkv.get(), att.get(), s,
                                                               dscore.get(), dqkv.get());
          AttentionBackwardColumnsKernel<<<l.blocks, l.threads>>>(dy.get(), qkv.get(), att.get(),
                                                                  dscore.get(), s, dqkv.get());
        }
        return cudaGetLastError();
      },
      ms);
}

cudaError_t BenchCrossEntropy(const BenchDims &d, int iters, double *ms) {
  const long rows = d.B * d.T, V = d.V;
  cudaError_t st = cudaSuccess;
  DeviceArray<float> logits(nullptr, size_t(rows * V), &st), probs(nullptr, size_t(rows * V), &st),
      nll(nullptr, size_t(rows), &st), counted(nullptr, size_t(rows), &st),
      dlogits(nullptr, size_t(rows * V), &st);
  DeviceArray<int32_t> targets(nullptr, size_t(rows), &st);
  if (st == cudaSuccess) st = FillRandom(logits.get(), rows * V, 3u, 3.0f);
  if (st == cudaSuccess) st = RandomTokens(targets.get(), rows, V);
  if (st != cudaSuccess) return st;
  const Launch l = ElementwiseLaunch(rows * V);
  return TimeLaunches(
      iters,
      [&] {
        CrossEntropyForwardKernel<<<int(rows), 256>>>(logits.get(), targets.get(), V, probs.get(),
                                                      nll.get(), counted.get());
        CrossEntropyBackwardKernel<<<l.blocks, l.threads>>>(probs.get(), targets.get(), rows, V,
                                                            1.0f / float(rows), 0, dlogits.get());
        return cudaGetLastError();
      },
      ms);
}

cudaError_t BenchCrossEntropyFused(const BenchDims &d, int iters, double *ms) {
  const long rows = d.B * d.T, V = d.V;
  cudaError_t st = cudaSuccess;
  DeviceArray<float> logits(nullptr, size_t(rows * V), &st), nll(nullptr, size_t(rows), &st),
      dlogits(nullptr, size_t(rows * V), &st);
  DeviceArray<int32_t> targets(nullptr, size_t(rows), &st);
  DeviceArray<int> count(nullptr, 1, &st);
  if (st == cudaSuccess) st = FillRandom(logits.get(), rows * V, 3u, 3.0f);
  if (st == cudaSuccess) st = RandomTokens(targets.get(), rows, V);
  if (st != cudaSuccess) return st;
  return TimeLaunches(
      iters,
      [&] {
        LaunchCrossEntropyFused(logits.get(), targets.get(), rows, V, 1.0f, count.get(), nll.get(),
                                dlogits.get());
        return cudaGetLastError();
      },
      ms);
}

cudaError_t BenchEmbedding(const BenchDims &d, int iters, double *ms) {
  const long BT = d.B * d.T, C = d.C, V = d.V;
  cudaError_t st = cudaSuccess;
  DeviceArray<int32_t> tokens(nullptr, size_t(BT), &st);
  DeviceArray<float> wte(nullptr, size_t(V * C), &st), wpe(nullptr, size_t(d.T * C), &st),
      out(nullptr, size_t(BT * C), &st), dout(nullptr, size_t(BT * C), &st),
      dwte(nullptr, size_t(V * C), &st), dwpe(nullptr, size_t(d.T * C), &st);
  if (st == cudaSuccess) st = RandomTokens(tokens.get(), BT, V);
  if (st == cudaSuccess) st = FillRandom(wte.get(), V * C, 4u);
  if (st == cudaSuccess) st = FillRandom(wpe.get(), d.T * C, 5u);
  if (st == cudaSuccess) st = FillRandom(dout.get(), BT * C, 6u);
  if (st != cudaSuccess) return st;
  const Launch all = ElementwiseLaunch(BT * C), pos = ElementwiseLaunch(d.T * C);
  return TimeLaunches(
      iters,
      [&] {
        EmbeddingForwardKernel<<<all.blocks, all.threads>>>(tokens.get(), wte.get(), wpe.get(), BT,
                                                            d.T, C, out.get());
        PositionGradKernel<<<pos.blocks, pos.threads>>>(dout.get(), d.B, d.T, C, dwpe.get());
        TokenGradKernel<<<all.blocks, all.threads>>>(dout.get(), tokens.get(), BT, C, 0, d.V,
                                                     dwte.get());
        return cudaGetLastError();
      },
      ms);
}

}  // namespace

bool IsGptBenchKernel(const char *kernel) {
  const std::string name = kernel;
  return name == "attention_forward" || name == "attention_backward" || name == "cross_entropy" ||
         name == "cross_entropy_fused" || name == "embedding";
}

cudaError_t BenchGptKernel(const char *kernel, const BenchDims &d, int iters, double *ms) {
  const std::string name = kernel;
  if (name == "attention_forward") return BenchAttention(false, d, iters, ms);
  if (name == "attention_backward") return BenchAttention(true, d, iters, ms);
  if (name == "cross_entropy") return BenchCrossEntropy(d, iters, ms);
  if (name == "cross_entropy_fused") return BenchCrossEntropyFused(d, iters, ms);
  if (name == "embedding") return BenchEmbedding(d, iters, ms);
  return cudaErrorInvalidValue;
}

}  // namespace dst::cuda

namespace cuda = dst::cuda;

// Embedding forward (out [B*T, C] assigned) and backward from dout (dwte
// [V, C], dwpe [maxT, C] accumulated onto what they hold). Returns 0, 1 when
// there is no device, 2 on an error (err[cap]).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_embedding(
    const int32_t *tokens, const float *wte, const float *wpe, long B, long T, long C, long V,
    long max_T, const float *dout, float *out, float *dwte, float *dwpe, char *err, size_t cap) {
  if (!cuda::HasDevice()) return 1;
  const long BT = B * T;
  cudaError_t st = cudaSuccess;
  cuda::DeviceArray<int32_t> d_tokens(tokens, size_t(BT), &st);
  cuda::DeviceArray<float> d_wte(wte, size_t(V * C), &st), d_wpe(wpe, size_t(max_T * C), &st),
      d_dout(dout, size_t(BT * C), &st), d_out(nullptr, size_t(BT * C), &st),
      d_dwte(dwte, size_t(V * C), &st), d_dwpe(dwpe, size_t(max_T * C), &st);
  if (st == cudaSuccess) {
    const cuda::Launch all = cuda::ElementwiseLaunch(BT * C), pos = cuda::ElementwiseLaunch(T * C);
    cuda::EmbeddingForwardKernel<<<all.blocks, all.threads>>>(d_tokens.get(), d_wte.get(),
                                                              d_wpe.get(), BT, T, C, d_out.get());
    cuda::PositionGradKernel<<<pos.blocks, pos.threads>>>(d_dout.get(), B, T, C, d_dwpe.get());
    cuda::TokenGradKernel<<<all.blocks, all.threads>>>(d_dout.get(), d_tokens.get(), BT, C, 0, V,
                                                       d_dwte.get());
    st = cudaGetLastError();
  }
  d_out.CopyTo(out);
  d_dwte.CopyTo(dwte);
  d_dwpe.CopyTo(dwpe);
  return st == cudaSuccess ? 0 : cuda::Fail(err, cap, "embedding", st);
}

// Softmax cross-entropy forward (probs [rows, V]; *loss = the mean NLL over
// counted rows, *counted) and backward (dlogits [rows, V] with grad_scale).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_cross_entropy(
    const float *logits, const int32_t *targets, long rows, long V, float grad_scale, float *probs,
    float *loss, long *counted, float *dlogits, char *err, size_t cap) {
  if (!cuda::HasDevice()) return 1;
  cudaError_t st = cudaSuccess;
  cuda::DeviceArray<float> d_logits(logits, size_t(rows * V), &st),
      d_probs(nullptr, size_t(rows * V), &st), d_nll(nullptr, size_t(rows), &st),
      d_counted(nullptr, size_t(rows), &st), d_dlogits(nullptr, size_t(rows * V), &st);
  cuda::DeviceArray<int32_t> d_targets(targets, size_t(rows), &st);
  std::vector<float> nll(static_cast<size_t>(rows)), counts(static_cast<size_t>(rows));
  if (st == cudaSuccess) {
    cuda::CrossEntropyForwardKernel<<<int(rows), 256>>>(
        d_logits.get(), d_targets.get(), V, d_probs.get(), d_nll.get(), d_counted.get());
    st = cudaGetLastError();
  }
  d_nll.CopyTo(nll.data());
  d_counted.CopyTo(counts.data());
  double sum = 0, n = 0;
  for (long r = 0; r < rows; ++r) sum += nll[size_t(r)], n += counts[size_t(r)];
  *counted = long(n);
  *loss = n > 0 ? float(sum / n) : 0.0f;
  if (st == cudaSuccess) {
    const cuda::Launch l = cuda::ElementwiseLaunch(rows * V);
    const float k = n > 0 ? grad_scale / float(n) : 0.0f;
    cuda::CrossEntropyBackwardKernel<<<l.blocks, l.threads>>>(d_probs.get(), d_targets.get(), rows,
                                                              V, k, 0, d_dlogits.get());
    st = cudaGetLastError();
  }
  d_probs.CopyTo(probs);
  d_dlogits.CopyTo(dlogits);
  return st == cudaSuccess ? 0 : cuda::Fail(err, cap, "cross-entropy", st);
}

// The fused softmax cross-entropy: *loss = the mean NLL over counted rows,
// *counted, and dlogits [rows, V] with grad_scale, without the probabilities.
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_cross_entropy_fused(
    const float *logits, const int32_t *targets, long rows, long V, float grad_scale, float *loss,
    long *counted, float *dlogits, char *err, size_t cap) {
  if (!cuda::HasDevice()) return 1;
  cudaError_t st = cudaSuccess;
  cuda::DeviceArray<float> d_logits(logits, size_t(rows * V), &st),
      d_nll(nullptr, size_t(rows), &st), d_dlogits(nullptr, size_t(rows * V), &st);
  cuda::DeviceArray<int32_t> d_targets(targets, size_t(rows), &st);
  cuda::DeviceArray<int> d_count(nullptr, 1, &st);
  if (st == cudaSuccess) {
    cuda::LaunchCrossEntropyFused(d_logits.get(), d_targets.get(), rows, V, grad_scale,
                                  d_count.get(), d_nll.get(), d_dlogits.get());
    st = cudaGetLastError();
  }
  std::vector<float> nll(static_cast<size_t>(rows));
  int count = 0;
  d_nll.CopyTo(nll.data());
  d_count.CopyTo(&count);
  double sum = 0;
  for (float v : nll) sum += v;
  *counted = count;
  *loss = count > 0 ? float(sum / count) : 0.0f;
  d_dlogits.CopyTo(dlogits);
  return st == cudaSuccess ? 0 : cuda::Fail(err, cap, "fused cross-entropy", st);
}

// Causal attention forward (att [B, H, T, T], y [B, T, C]) and backward
// from dy (dqkv [B, T, 3C] assigned).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_attention(
    const float *qkv, const float *dy, long B, long T, long C, long H, float *att, float *y,
    float *dqkv, char *err, size_t cap) {
  if (!cuda::HasDevice()) return 1;
  const cuda::AttentionDims s{B, T, C, H};
  cudaError_t st = cudaSuccess;
  cuda::DeviceArray<float> d_qkv(qkv, size_t(B * T * 3 * C), &st), d_dy(dy, size_t(B * T * C), &st),
      d_att(nullptr, size_t(s.rows() * T), &st), d_y(nullptr, size_t(B * T * C), &st),
      d_dscore(nullptr, size_t(s.rows() * T), &st), d_dqkv(nullptr, size_t(B * T * 3 * C), &st);
  if (st == cudaSuccess) {
    const cuda::Launch l = cuda::WarpPerRowLaunch(s.rows(), 128);
    cuda::AttentionForwardKernel<<<l.blocks, l.threads>>>(d_qkv.get(), s, d_att.get(), d_y.get());
    cuda::AttentionBackwardRowsKernel<<<l.blocks, l.threads>>>(d_dy.get(), d_qkv.get(), d_att.get(),
                                                               s, d_dscore.get(), d_dqkv.get());
    cuda::AttentionBackwardColumnsKernel<<<l.blocks, l.threads>>>(
        d_dy.get(), d_qkv.get(), d_att.get(), d_dscore.get(), s, d_dqkv.get());
    st = cudaGetLastError();
  }
  d_att.CopyTo(att);
  d_y.CopyTo(y);
  d_dqkv.CopyTo(dqkv);
  return st == cudaSuccess ? 0 : cuda::Fail(err, cap, "attention", st);
}

// The sum of squares of x[n] (double) and the count of non-finite values.
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_grad_stats(
    const float *x, long n, double *sum_squares, long *nonfinite, char *err, size_t cap) {
  if (!cuda::HasDevice()) return 1;
  const cuda::Launch l = cuda::ElementwiseLaunch(n);
  cudaError_t st = cudaSuccess;
  cuda::DeviceArray<float> d_x(x, size_t(n), &st);
  cuda::DeviceArray<double> d_partial(nullptr, size_t(l.blocks), &st);
  cuda::DeviceArray<int> d_bad(nullptr, 1, &st);
  if (st == cudaSuccess) {
    cuda::GradStatsKernel<<<l.blocks, 256>>>(d_x.get(), n, d_partial.get(), d_bad.get());
    st = cudaGetLastError();
  }
  std::vector<double> partial(static_cast<size_t>(l.blocks));
  int bad = 0;
  d_partial.CopyTo(partial.data());
  d_bad.CopyTo(&bad);
  double sum = 0;
  for (double p : partial) sum += p;
  *sum_squares = sum;
  *nonfinite = bad;
  return st == cudaSuccess ? 0 : cuda::Fail(err, cap, "grad stats", st);
}
