// What every part of the CUDA plugin shares: launch shapes (launch.h), warp reductions,
// and the host-side plumbing of its test entry points (the GPU test suite
// passes host arrays; each entry point copies them to device 0, runs its
// kernels and copies the results back).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>

#include "core/kernels/cuda/launch.h"

namespace dst::cuda {

// The sum of v over the warp, in every lane (a fixed butterfly order).
__device__ inline float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ inline float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Whether this process sees a device (the entry points return 1 when not).
inline bool HasDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Writes "what: cuda error" into err[cap]; returns 2 (an entry point's error code).
inline int Fail(char *err, size_t cap, const char *what, cudaError_t status) {
  if (err != nullptr && cap > 0)
    std::snprintf(err, cap, "%s: %s", what, cudaGetErrorString(status));
  return 2;
}

// A device copy of a host array, freed with the object; the first error of
// any array sticks in `status` (and later operations do nothing).
template <typename T>
class DeviceArray {
 public:
  DeviceArray(const T *host, size_t count, cudaError_t *status) : count_(count), status_(status) {
    if (*status_ == cudaSuccess) *status_ = cudaMalloc(&device_, bytes());
    if (*status_ == cudaSuccess && host != nullptr)
      *status_ = cudaMemcpy(device_, host, bytes(), cudaMemcpyHostToDevice);
    else if (*status_ == cudaSuccess)
      *status_ = cudaMemset(device_, 0, bytes());
  }
  ~DeviceArray() { cudaFree(device_); }
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;

  T *get() { return device_; }
  // Copies the device array into host[count] (after the kernels ran).
  void CopyTo(T *host) {
    if (*status_ == cudaSuccess && host != nullptr)
      *status_ = cudaMemcpy(host, device_, bytes(), cudaMemcpyDeviceToHost);
  }

 private:
  size_t bytes() const { return count_ * sizeof(T); }
  T *device_ = nullptr;
  size_t count_;
  cudaError_t *status_;
};

// qkv [B, T, W], att [B, H, T, T], y [B, T, C]: cpu/attention.h's layouts
// (AttentionShape, core/kernels/kernels.h): blocked [q heads | k heads | v
// heads] rows (W = C + 2 kv hs; GPT-2: 3C), or BLOOM's interleaved [head: q
// k v]; kv key/value heads, query head h reading key/value head h / (H / kv);
// ALiBi slopes over alibi_heads heads from first_head (0: none).
struct AttentionDims {
  long B, T, C, H;
  long kv_heads = 0;  // 0: H
  bool interleaved = false;
  long alibi_heads = 0;
  long first_head = 0;
  __host__ __device__ long hs() const { return C / H; }
  __host__ __device__ long rows() const { return B * H * T; }
  __host__ __device__ long kv() const { return kv_heads > 0 ? kv_heads : H; }
  __host__ __device__ long kv_rows() const { return B * kv() * T; }
  __host__ __device__ long width() const { return C + 2 * kv() * hs(); }
  __host__ __device__ bool plain() const { return kv() == H && !interleaved && alibi_heads == 0; }
  // Where query head h (part 0) or key/value head g (parts 1, 2) starts in a row.
  __host__ __device__ long Offset(long head, int part) const {
    if (interleaved) return (3 * head + part) * hs();
    return part == 0 ? head * hs() : C + ((part - 1) * kv() + head) * hs();
  }
  // The head slice of token (b, t)'s q (part 0), or the k (1) or v (2) of
  // query head h's key/value head.
  __device__ long At(long b, long t, long h, int part) const {
    return (b * T + t) * width() + Offset(part == 0 ? h : h / (H / kv()), part);
  }
  // Key/value head g's k (1) or v (2) of token (b, t).
  __device__ long KvAt(long b, long t, long g, int part) const {
    return (b * T + t) * width() + Offset(g, part);
  }
};

// ---- What the bench entry points share (device-resident inputs, CUDA-event timing).

// x[i] = a deterministic pseudo-random value in [-scale, scale), as type T.
template <typename T>
__global__ void FillKernel(T *x, long n, unsigned seed, float scale) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = T((float(h & 0xffffu) / 32768.0f - 1.0f) * scale);
  }
}

template <typename T>
cudaError_t FillRandom(T *x, long n, unsigned seed, float scale = 1.0f) {
  const Launch l = ElementwiseLaunch(n);
  FillKernel<<<l.blocks, l.threads>>>(x, n, seed, scale);
  return cudaGetLastError();
}

// The mean milliseconds of one launch() (its kernels on the default stream)
// over `iters` back-to-back calls after one untimed call, by CUDA events.
template <typename F>
cudaError_t TimeLaunches(int iters, F launch, double *ms_per_call) {
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaError_t st = cudaEventCreate(&start);
  if (st == cudaSuccess) st = cudaEventCreate(&stop);
  if (st == cudaSuccess) st = launch();
  if (st == cudaSuccess) st = cudaEventRecord(start);
  for (int i = 0; i < iters && st == cudaSuccess; ++i) st = launch();
  if (st == cudaSuccess) st = cudaEventRecord(stop);
  if (st == cudaSuccess) st = cudaEventSynchronize(stop);
  float ms = 0.0f;
  if (st == cudaSuccess) st = cudaEventElapsedTime(&ms, start, stop);
  *ms_per_call = double(ms) / (iters > 0 ? iters : 1);
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  return st;
}

// The shapes a kernel bench runs at: a GPT's micro-batch B x context T,
// width C, H heads and vocabulary V (row-wise kernels see B*T rows of C).
struct BenchDims {
  long B, T, C, H, V;
};

// Whether BenchGptKernel knows `kernel`: "attention_forward",
// "attention_backward", "cross_entropy" (forward and backward), "embedding"
// (forward and backward).
bool IsGptBenchKernel(const char *kernel);
// Times one of the GPT kernels (gpt_kernels.cu) on device-resident random inputs.
cudaError_t BenchGptKernel(const char *kernel, const BenchDims &d, int iters, double *ms);
// Times the attention through batched GEMMs (attention_gemm.cu), forward or backward.
cudaError_t BenchAttentionGemm(bool backward, const BenchDims &d, int iters, double *ms);
// Times the fused attention (flash_attention.cu), forward or backward.
cudaError_t BenchFlashAttention(bool backward, const BenchDims &d, int iters, double *ms);

// The fused causal attention (flash_attention.cu) on `stream`: whether it
// takes this shape (head size at most 128, C a multiple of H, B x H at most
// 65535); y [B, T, C] and lse [B, H, T] from qkv [B, T, 3C]; dqkv [B, T, 3C]
// (assigned) from dy and the forward's y and lse, D scratch [B, H, T].
bool FlashAttentionTakes(const AttentionDims &s);
cudaError_t FlashAttentionForward(const float *qkv, const AttentionDims &s, float *y, float *lse,
                                  cudaStream_t stream = nullptr);
cudaError_t FlashAttentionBackward(const float *qkv, const float *y, const float *lse,
                                   const float *dy, const AttentionDims &s, float *dqkv, float *D,
                                   cudaStream_t stream = nullptr);

// The bf16 scratch of the GEMM attention's bf16 products (all null: fp32
// products): qkv [B, T, 3C] and dy [B, T, C] rounded, P and the score
// gradient [B, H, T, T] rounded.
struct AttentionBf16 {
  __nv_bfloat16 *qkv = nullptr, *dy = nullptr, *p = nullptr, *ds = nullptr;
};

// Causal attention as batched cuBLASLt GEMMs (attention_gemm.cu) on
// `stream`, GPT-2's head layout only (AttentionDims::plain): att [B, H, T, T]
// (the probabilities, fp32) and y [B, T, C] from qkv [B, T, 3C]; dqkv
// (assigned) from dy, qkv and att, dscore scratch [B, H, T, T]. Launch errors
// are left for the caller's cudaGetLastError.
cublasStatus_t AttentionGemmForward(cublasLtHandle_t handle, const float *qkv,
                                    const AttentionDims &s, float *att, float *y, void *workspace,
                                    size_t workspace_bytes, cudaStream_t stream,
                                    const AttentionBf16 &bf16 = {});
cublasStatus_t AttentionGemmBackward(cublasLtHandle_t handle, const float *dy, const float *qkv,
                                     const float *att, const AttentionDims &s, float *dscore,
                                     float *dqkv, void *workspace, size_t workspace_bytes,
                                     cudaStream_t stream, const AttentionBf16 &bf16 = {});

}  // namespace dst::cuda
