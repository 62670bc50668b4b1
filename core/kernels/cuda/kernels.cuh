// The plugin's training kernels that more than one of its files launches:
// defined in cuda_plugin.cu (element-wise, LayerNorm), gpt_kernels.cu
// (embedding, cross-entropy, attention) and family_kernels.cu (RMSNorm,
// rotary, the SiLU gate), launched by their test entry
// points there and by the kernel backend (device_kernels.cu) on its stream.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/kernels/cuda/plugin_support.cuh"
#include "core/kernels/elementwise_math.h"

namespace dst::cuda {

constexpr int32_t kIgnoreIndex = -1;  // cpu::kIgnoreIndex

// The max (kMax) or the sum of v over the block, in every thread; blockDim.x
// a multiple of the warp size.
template <bool kMax>
__device__ float BlockReduce(float v) {
  __shared__ float partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = kMax ? WarpMax(v) : WarpSum(v);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = int(blockDim.x) / kWarp;
  v = lane < warps ? partial[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? WarpMax(v) : WarpSum(v);
}

// ---- cuda_plugin.cu
// Fused Adam/AdamW over a flat range (math::AdamElement); half_out (or null):
// the updated weights rounded to bf16 (or fp16) in the same pass.
__global__ void AdamKernel(float *param, const float *grad, float *exp_avg, float *exp_avg_sq,
                           long n, math::AdamConstants k, uint16_t *half_out, bool bf16);
// y = gelu(x), dx = dy gelu'(x): four elements a thread (ElementwiseLaunch((n + 3) / 4)).
__global__ void GeluForwardKernel(const float *x, float *y, long n);
__global__ void GeluBackwardKernel(const float *x, const float *dy, float *dx, long n);
// One warp a row (WarpPerRowLaunch): out, mean, rstd; dx (+=).
__global__ void LayerNormForwardKernel(const float *x, const float *w, const float *b, long rows,
                                       long C, float *out, float *mean, float *rstd, float eps);
__global__ void LayerNormInputGradKernel(const float *dy, const float *x, const float *w,
                                         const float *mean, const float *rstd, long rows, long C,
                                         float *dx);
// The scratch floats LaunchLayerNormParamGrad needs.
size_t LayerNormParamGradScratch(long rows, long C);
// dw, db (+=) [C] in two fixed-order passes through scratch, on `stream`.
void LaunchLayerNormParamGrad(const float *dy, const float *x, const float *mean, const float *rstd,
                              long rows, long C, float *dw, float *db, float *scratch,
                              cudaStream_t stream = nullptr);

// ---- gpt_kernels.cu
// out [BT, C] = wte[tokens] + wpe[bt % T].
__global__ void EmbeddingForwardKernel(const int32_t *tokens, const float *wte, const float *wpe,
                                       long BT, long T, long C, float *out);
// dwpe [T, C] += dout summed over the batch in order; dwte [rows, C] +=
// dout rows of the tokens in [first, first + rows) (atomics).
__global__ void PositionGradKernel(const float *dout, long B, long T, long C, float *dwpe);
__global__ void TokenGradKernel(const float *dout, const int32_t *tokens, long BT, long C,
                                long first, long rows, float *dwte);
// dlogits (assigns) = (p - onehot(target - first)) k, zeros for ignored rows.
__global__ void CrossEntropyBackwardKernel(const float *probs, const int32_t *targets, long rows,
                                           long V, float k, long first, float *dlogits);
// One block a row: probs (may alias logits), nll and counted per row.
__global__ void CrossEntropyForwardKernel(const float *logits, const int32_t *targets, long V,
                                          float *probs, float *nll, float *counted);
// One warp a query row (WarpPerRowLaunch(s.rows(), 128)); the backward in two
// passes through dscore [B, H, T, T], dqkv assigned.
__global__ void AttentionForwardKernel(const float *qkv, AttentionDims s, float *att, float *y);
__global__ void AttentionBackwardRowsKernel(const float *dy, const float *qkv, const float *att,
                                            AttentionDims s, float *dscore, float *dqkv);
__global__ void AttentionBackwardColumnsKernel(const float *dy, const float *qkv, const float *att,
                                               const float *dscore, AttentionDims s, float *dqkv);

// ---- family_kernels.cu
// RMSNorm, one warp a row (WarpPerRowLaunch): out, rstd; dx (+=).
__global__ void RmsNormForwardKernel(const float *x, const float *w, long rows, long C, float eps,
                                     float *out, float *rstd);
__global__ void RmsNormInputGradKernel(const float *dy, const float *x, const float *w,
                                       const float *rstd, long rows, long C, float *dx);
// The scratch floats LaunchRmsNormParamGrad needs; dw (+=) [C] in two
// fixed-order passes through it, on `stream`.
size_t RmsNormParamGradScratch(long rows, long C);
void LaunchRmsNormParamGrad(const float *dy, const float *x, const float *rstd, long rows, long C,
                            float *dw, float *scratch, cudaStream_t stream);
// qkv [B, T, W] in place: the query and key heads rotated (sign -1: back).
__global__ void RotaryKernel(float *qkv, AttentionDims s, math::RopeParams rope, float sign);
// out = silu(gate) up; dgate = dout up silu'(gate), dup = dout silu(gate).
__global__ void SiluMulForwardKernel(const float *gate, const float *up, long n, float *out);
__global__ void SiluMulBackwardKernel(const float *dout, const float *gate, const float *up, long n,
                                      float *dgate, float *dup);

}  // namespace dst::cuda
