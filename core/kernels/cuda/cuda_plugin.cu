// libdstrain_cuda.so: the CUDA backend's plugin, opened with dlopen on use
// (core/device/cuda_devices.cc) so that libdstrain.so loads on a machine
// without CUDA. This file reports the devices this process sees (dstrain
// report) and holds the element-wise kernels, written over
// the DST_HOST_DEVICE formulas the CPU kernels use (elementwise_math.h), so
// the CPU tests exercise the math the GPU runs, plus LayerNorm and fused
// Adam. Compiled for sm_80 and sm_90 (+ PTX) with warnings as errors; the GPU
// test suite passed on an H200 (2026-11-26). The GPT's kernels are in
// gpt_kernels.cu and flash_attention.cu, the GEMMs (cuBLASLt) in gemm.cu;
// dst_cuda_plugin_kernel_bench times them for bench/bench_gpu_kernels.py.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/kernels/cuda/kernels.cuh"
#include "core/kernels/elementwise_math.h"
#include "core/precision/convert.h"

namespace dst::cuda {

__device__ inline bool Aligned16(const void *p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// y[i] = gelu(x[i]) (tanh approximation, as the CPU kernel); four elements a
// thread through float4 when both arrays are 16-byte aligned (launched with
// ElementwiseLaunch((n + 3) / 4)), the rest one at a time.
__global__ void GeluForwardKernel(const float *x, float *y, long n) {
  const long first = blockIdx.x * long(blockDim.x) + threadIdx.x;
  const long stride = long(gridDim.x) * blockDim.x;
  long done = 0;
  if (Aligned16(x) && Aligned16(y)) {
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float4 *y4 = reinterpret_cast<float4 *>(y);
    for (long i = first; i < n / 4; i += stride) {
      const float4 v = x4[i];
      y4[i] = make_float4(math::Gelu(v.x), math::Gelu(v.y), math::Gelu(v.z), math::Gelu(v.w));
    }
    done = n / 4 * 4;
  }
  for (long i = done + first; i < n; i += stride) y[i] = math::Gelu(x[i]);
}

// dx[i] = dy[i] * gelu'(x[i]), vectorised as the forward.
__global__ void GeluBackwardKernel(const float *x, const float *dy, float *dx, long n) {
  const long first = blockIdx.x * long(blockDim.x) + threadIdx.x;
  const long stride = long(gridDim.x) * blockDim.x;
  long done = 0;
  if (Aligned16(x) && Aligned16(dy) && Aligned16(dx)) {
    const float4 *x4 = reinterpret_cast<const float4 *>(x),
                 *g4 = reinterpret_cast<const float4 *>(dy);
    float4 *d4 = reinterpret_cast<float4 *>(dx);
    for (long i = first; i < n / 4; i += stride) {
      const float4 v = x4[i], g = g4[i];
      d4[i] = make_float4(g.x * math::GeluGrad(v.x), g.y * math::GeluGrad(v.y),
                          g.z * math::GeluGrad(v.z), g.w * math::GeluGrad(v.w));
    }
    done = n / 4 * 4;
  }
  for (long i = done + first; i < n; i += stride) dx[i] = dy[i] * math::GeluGrad(x[i]);
}

// y[i] = x[i] rounded to bf16 (or fp16) and back: the casts the 16-bit paths use.
__global__ void RoundTripKernel(const float *x, float *y, long n, bool bf16) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    y[i] = bf16 ? BFloat16ToFloat(FloatToBFloat16(x[i])) : HalfToFloat(FloatToHalf(x[i]));
}

__global__ void AdamKernel(float *param, const float *grad, float *exp_avg, float *exp_avg_sq,
                           long n, math::AdamConstants k, uint16_t *half_out, bool bf16) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x) {
    float p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
    math::AdamElement(p, grad[i], m, v, k);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (half_out) half_out[i] = bf16 ? FloatToBFloat16(p) : FloatToHalf(p);
  }
}

// ---- LayerNorm over the last dimension (cpu/layernorm.h's math): one warp a row.

// out = (x - mean) * rstd * w + b per row of x [rows, C]; mean, rstd [rows] saved.
__global__ void LayerNormForwardKernel(const float *x, const float *w, const float *b, long rows,
                                       long C, float *out, float *mean, float *rstd, float eps) {
  const long row = blockIdx.x * long(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float *xr = x + row * C;
  float sum = 0;
  for (long i = lane; i < C; i += kWarp) sum += xr[i];
  const float m = WarpSum(sum) / float(C);
  float var = 0;
  for (long i = lane; i < C; i += kWarp) var += (xr[i] - m) * (xr[i] - m);
  const float s = 1.0f / sqrtf(WarpSum(var) / float(C) + eps);
  float *o = out + row * C;
  for (long i = lane; i < C; i += kWarp) o[i] = (xr[i] - m) * s * w[i] + b[i];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dx (+=) per row: (dy w - mean(dy w) - norm mean(dy w norm)) rstd.
__global__ void LayerNormInputGradKernel(const float *dy, const float *x, const float *w,
                                         const float *mean, const float *rstd, long rows, long C,
                                         float *dx) {
  const long row = blockIdx.x * long(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float *xr = x + row * C, *g = dy + row * C;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0, dnorm_norm_sum = 0;
  for (long i = lane; i < C; i += kWarp) {
    const float dnorm = g[i] * w[i];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * (xr[i] - m) * s;
  }
  const float dnorm_mean = WarpSum(dnorm_sum) / float(C);
  const float dnorm_norm_mean = WarpSum(dnorm_norm_sum) / float(C);
  float *dxr = dx + row * C;
  for (long i = lane; i < C; i += kWarp) {
    const float norm = (xr[i] - m) * s;
    dxr[i] += (g[i] * w[i] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// LayerNorm's parameter gradients, pass 1: partial_w, partial_b [chunks, C]
// = the sums over chunk blockIdx.y's rows, one thread a column.
__global__ void LayerNormParamGradPartialKernel(const float *dy, const float *x, const float *mean,
                                                const float *rstd, long rows, long C,
                                                long rows_per_chunk, float *partial_w,
                                                float *partial_b) {
  const long col = blockIdx.x * long(blockDim.x) + threadIdx.x;
  if (col >= C) return;
  const long first = blockIdx.y * rows_per_chunk;
  const long last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float w_sum = 0, b_sum = 0;
  for (long r = first; r < last; ++r) {
    const float g = dy[r * C + col];
    w_sum += g * (x[r * C + col] - mean[r]) * rstd[r];
    b_sum += g;
  }
  partial_w[blockIdx.y * C + col] = w_sum;
  partial_b[blockIdx.y * C + col] = b_sum;
}

// Pass 2: dw, db (+=) [C] = the chunks' partials summed in chunk order (a
// fixed order: the result does not depend on scheduling).
__global__ void LayerNormParamGradSumKernel(const float *partial_w, const float *partial_b,
                                            long chunks, long C, float *dw, float *db) {
  const long col = blockIdx.x * long(blockDim.x) + threadIdx.x;
  if (col >= C) return;
  float w_sum = 0, b_sum = 0;
  for (long k = 0; k < chunks; ++k) {
    w_sum += partial_w[k * C + col];
    b_sum += partial_b[k * C + col];
  }
  dw[col] += w_sum;
  db[col] += b_sum;
}

// The scratch floats LaunchLayerNormParamGrad needs.
size_t LayerNormParamGradScratch(long rows, long C) {
  return 2 * size_t(ColumnChunkLaunch(rows, C, 256).chunks) * size_t(C);
}

// dw, db (+=) [C] from dy, x [rows, C] and the saved mean, rstd, through
// scratch[LayerNormParamGradScratch(rows, C)].
void LaunchLayerNormParamGrad(const float *dy, const float *x, const float *mean, const float *rstd,
                              long rows, long C, float *dw, float *db, float *scratch,
                              cudaStream_t stream) {
  const ColumnChunks c = ColumnChunkLaunch(rows, C, 256);
  float *partial_w = scratch, *partial_b = scratch + size_t(c.chunks) * size_t(C);
  LayerNormParamGradPartialKernel<<<dim3(unsigned(c.column_blocks), unsigned(c.chunks)), c.threads,
                                    0, stream>>>(dy, x, mean, rstd, rows, C, c.rows_per_chunk,
                                                 partial_w, partial_b);
  LayerNormParamGradSumKernel<<<c.column_blocks, c.threads, 0, stream>>>(partial_w, partial_b,
                                                                         c.chunks, C, dw, db);
}

namespace {

// Appends `text` with quotes and JSON escapes.
void AppendJsonString(std::string &out, const char *text) {
  out += '"';
  for (const char *c = text; *c; ++c) {
    if (*c == '"' || *c == '\\') out += '\\';
    if (static_cast<unsigned char>(*c) >= 0x20) out += *c;
  }
  out += '"';
}

std::string DevicesJson() {
  std::string out = "{";
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  out += "\"runtime_version\":" + std::to_string(runtime) +
         ",\"driver_version\":" + std::to_string(driver) + ",\"devices\":[";
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  for (int d = 0; status == cudaSuccess && d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    if (d > 0) out += ",";
    out += "{\"index\":" + std::to_string(d) + ",\"name\":";
    AppendJsonString(out, prop.name);
    out += ",\"total_memory\":" + std::to_string(prop.totalGlobalMem) +
           ",\"compute_capability\":\"" + std::to_string(prop.major) + "." +
           std::to_string(prop.minor) + "\"}";
  }
  out += "],\"error\":";
  AppendJsonString(out, status == cudaSuccess ? "" : cudaGetErrorString(status));
  out += "}";
  return out;
}

}  // namespace

// ---- bench (dst_cuda_plugin_kernel_bench)

namespace {

// GELU forward or backward over n elements.
cudaError_t BenchGelu(bool backward, long n, int iters, double *ms) {
  cudaError_t st = cudaSuccess;
  DeviceArray<float> x(nullptr, size_t(n), &st), dy(nullptr, size_t(n), &st),
      out(nullptr, size_t(n), &st);
  if (st == cudaSuccess) st = FillRandom(x.get(), n, 1u, 3.0f);
  if (st == cudaSuccess) st = FillRandom(dy.get(), n, 2u);
  if (st != cudaSuccess) return st;
  const Launch l = ElementwiseLaunch((n + 3) / 4);
  return TimeLaunches(
      iters,
      [&] {
        if (backward)
          GeluBackwardKernel<<<l.blocks, l.threads>>>(x.get(), dy.get(), out.get(), n);
        else
          GeluForwardKernel<<<l.blocks, l.threads>>>(x.get(), out.get(), n);
        return cudaGetLastError();
      },
      ms);
}

// LayerNorm forward, or backward (input and parameter gradients), over rows x C.
cudaError_t BenchLayerNorm(bool backward, long rows, long C, int iters, double *ms) {
  const size_t n = size_t(rows * C);
  cudaError_t st = cudaSuccess;
  DeviceArray<float> x(nullptr, n, &st), w(nullptr, size_t(C), &st), b(nullptr, size_t(C), &st),
      dy(nullptr, n, &st), out(nullptr, n, &st), mean(nullptr, size_t(rows), &st),
      rstd(nullptr, size_t(rows), &st), dx(nullptr, n, &st), dw(nullptr, size_t(C), &st),
      db(nullptr, size_t(C), &st), scratch(nullptr, LayerNormParamGradScratch(rows, C), &st);
  if (st == cudaSuccess) st = FillRandom(x.get(), long(n), 1u);
  if (st == cudaSuccess) st = FillRandom(w.get(), C, 2u);
  if (st == cudaSuccess) st = FillRandom(dy.get(), long(n), 3u);
  if (st != cudaSuccess) return st;
  const Launch by_row = WarpPerRowLaunch(rows, 256);
  LayerNormForwardKernel<<<by_row.blocks, by_row.threads>>>(
      x.get(), w.get(), b.get(), rows, C, out.get(), mean.get(), rstd.get(), 1e-5f);
  return TimeLaunches(
      iters,
      [&] {
        if (!backward) {
          LayerNormForwardKernel<<<by_row.blocks, by_row.threads>>>(
              x.get(), w.get(), b.get(), rows, C, out.get(), mean.get(), rstd.get(), 1e-5f);
        } else {
          LayerNormInputGradKernel<<<by_row.blocks, by_row.threads>>>(
              dy.get(), x.get(), w.get(), mean.get(), rstd.get(), rows, C, dx.get());
          LaunchLayerNormParamGrad(dy.get(), x.get(), mean.get(), rstd.get(), rows, C, dw.get(),
                                   db.get(), scratch.get());
        }
        return cudaGetLastError();
      },
      ms);
}

// One fused AdamW step over n parameters.
cudaError_t BenchAdam(long n, int iters, double *ms) {
  cudaError_t st = cudaSuccess;
  DeviceArray<float> p(nullptr, size_t(n), &st), g(nullptr, size_t(n), &st),
      m(nullptr, size_t(n), &st), v(nullptr, size_t(n), &st);
  if (st == cudaSuccess) st = FillRandom(p.get(), n, 1u, 0.02f);
  if (st == cudaSuccess) st = FillRandom(g.get(), n, 2u, 1e-3f);
  if (st != cudaSuccess) return st;
  math::AdamConstants k{};
  k.grad_mul = 1.0f;
  k.b1 = 0.9f;
  k.omb1 = 0.1f;
  k.b2 = 0.95f;
  k.omb2 = 0.05f;
  k.bias2_sqrt = 1.0f;
  k.eps = 1e-8f;
  k.step_size = 1e-4f;
  k.decay = 1.0f - 1e-5f;
  const Launch l = ElementwiseLaunch(n);
  return TimeLaunches(
      iters,
      [&] {
        AdamKernel<<<l.blocks, l.threads>>>(p.get(), g.get(), m.get(), v.get(), n, k, nullptr,
                                            true);
        return cudaGetLastError();
      },
      ms);
}

// Copies of n floats host -> device (or back), from page-locked or pageable
// host memory, on one stream.
cudaError_t BenchCopy(bool to_device, bool pinned, long n, int iters, double *ms) {
  const size_t bytes = size_t(n) * sizeof(float);
  cudaError_t st = cudaSuccess;
  DeviceArray<float> device(nullptr, size_t(n), &st);
  void *host = nullptr;
  if (st == cudaSuccess && pinned) st = cudaHostAlloc(&host, bytes, cudaHostAllocPortable);
  if (st == cudaSuccess && !pinned) host = std::malloc(bytes);
  if (st == cudaSuccess && host == nullptr) st = cudaErrorMemoryAllocation;
  if (st == cudaSuccess) std::memset(host, 1, bytes);
  cudaStream_t stream = nullptr;
  if (st == cudaSuccess) st = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (st == cudaSuccess)
    st = TimeLaunches(
        iters,
        [&] {
          cudaError_t e =
              to_device
                  ? cudaMemcpyAsync(device.get(), host, bytes, cudaMemcpyHostToDevice, stream)
                  : cudaMemcpyAsync(host, device.get(), bytes, cudaMemcpyDeviceToHost, stream);
          // TimeLaunches' events are on the default stream: join the copy to it.
          return e == cudaSuccess ? cudaStreamSynchronize(stream) : e;
        },
        ms);
  if (stream) cudaStreamDestroy(stream);
  if (pinned && host != nullptr) cudaFreeHost(host);
  if (!pinned) std::free(host);
  return st;
}

}  // namespace

}  // namespace dst::cuda

using dst::cuda::Fail;

// Runs one element-wise kernel on host arrays (copied to device 0 and back):
// the GPU test suite compares it with the CPU kernel. kernel: "gelu_forward"
// (out = gelu(a)), "gelu_backward" (out = b * gelu'(a)), "round_bf16",
// "round_fp16" (out = a through the 16-bit type and back). Returns 0, 1 when
// there is no device, 2 on an error (err[cap] says which).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_elementwise(
    const char *kernel, const float *a, const float *b, float *out, long n, char *err, size_t cap) {
  if (!dst::cuda::HasDevice()) return 1;
  const std::string name = kernel;
  float *da = nullptr, *db = nullptr, *dout = nullptr;
  const size_t bytes = size_t(n) * sizeof(float);
  cudaError_t st = cudaMalloc(&da, bytes);
  if (st == cudaSuccess) st = cudaMalloc(&db, bytes);
  if (st == cudaSuccess) st = cudaMalloc(&dout, bytes);
  if (st == cudaSuccess) st = cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice);
  if (st == cudaSuccess && b != nullptr) st = cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice);
  int rc = 0;
  if (st != cudaSuccess) {
    rc = Fail(err, cap, "copying the inputs", st);
  } else {
    const dst::cuda::Launch l = dst::cuda::ElementwiseLaunch(n);
    const dst::cuda::Launch l4 = dst::cuda::ElementwiseLaunch((n + 3) / 4);
    if (name == "gelu_forward")
      dst::cuda::GeluForwardKernel<<<l4.blocks, l4.threads>>>(da, dout, n);
    else if (name == "gelu_backward")
      dst::cuda::GeluBackwardKernel<<<l4.blocks, l4.threads>>>(da, db, dout, n);
    else if (name == "round_bf16" || name == "round_fp16")
      dst::cuda::RoundTripKernel<<<l.blocks, l.threads>>>(da, dout, n, name == "round_bf16");
    else
      rc = 2;
    if (rc == 2 && err != nullptr && cap > 0)
      std::snprintf(err, cap, "no element-wise kernel named \"%s\"", kernel);
    if (rc == 0) st = cudaGetLastError();
    if (rc == 0 && st == cudaSuccess) st = cudaMemcpy(out, dout, bytes, cudaMemcpyDeviceToHost);
    if (rc == 0 && st != cudaSuccess) rc = Fail(err, cap, name.c_str(), st);
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dout);
  return rc;
}

// One fused Adam step over host arrays (copied to device 0 and back), with the
// step's constants (math::AdamConstants): the GPU test suite compares it with
// CPU-Adam. Returns 0, 1 when there is no device, 2 on an error (err[cap]).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_adam(
    float *param, const float *grad, float *exp_avg, float *exp_avg_sq, long n,
    const dst::math::AdamConstants *k, char *err, size_t cap) {
  if (!dst::cuda::HasDevice()) return 1;
  float *buffers[4] = {};
  float *host[4] = {param, const_cast<float *>(grad), exp_avg, exp_avg_sq};
  const size_t bytes = size_t(n) * sizeof(float);
  cudaError_t st = cudaSuccess;
  for (int b = 0; b < 4 && st == cudaSuccess; ++b) {
    st = cudaMalloc(&buffers[b], bytes);
    if (st == cudaSuccess) st = cudaMemcpy(buffers[b], host[b], bytes, cudaMemcpyHostToDevice);
  }
  if (st == cudaSuccess) {
    const dst::cuda::Launch l = dst::cuda::ElementwiseLaunch(n);
    dst::cuda::AdamKernel<<<l.blocks, l.threads>>>(buffers[0], buffers[1], buffers[2], buffers[3],
                                                   n, *k, nullptr, true);
    st = cudaGetLastError();
  }
  for (int b : {0, 2, 3})
    if (st == cudaSuccess) st = cudaMemcpy(host[b], buffers[b], bytes, cudaMemcpyDeviceToHost);
  for (float *buffer : buffers) cudaFree(buffer);
  return st == cudaSuccess ? 0 : Fail(err, cap, "adam", st);
}

// LayerNorm forward then backward on host arrays (device 0, copied back):
// out, mean, rstd assigned; dx, dw, db accumulated (+=) onto what they hold.
// Returns 0, 1 when there is no device, 2 on an error (err[cap]).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_layernorm(
    const float *x, const float *w, const float *b, const float *dy, long rows, long C, float eps,
    float *out, float *mean, float *rstd, float *dx, float *dw, float *db, char *err, size_t cap) {
  if (!dst::cuda::HasDevice()) return 1;
  const size_t n = size_t(rows) * size_t(C);
  struct Array {
    const float *host;
    float *out_host;  // copied back into, or null
    size_t size;
    float *device = nullptr;
  } arrays[] = {
      {x, nullptr, n},     {w, nullptr, size_t(C)},    {b, nullptr, size_t(C)},    {dy, nullptr, n},
      {out, out, n},       {mean, mean, size_t(rows)}, {rstd, rstd, size_t(rows)}, {dx, dx, n},
      {dw, dw, size_t(C)}, {db, db, size_t(C)}};
  cudaError_t st = cudaSuccess;
  for (Array &a : arrays) {
    if (st == cudaSuccess) st = cudaMalloc(&a.device, a.size * sizeof(float));
    if (st == cudaSuccess)
      st = cudaMemcpy(a.device, a.host, a.size * sizeof(float), cudaMemcpyHostToDevice);
  }
  dst::cuda::DeviceArray<float> scratch(nullptr, dst::cuda::LayerNormParamGradScratch(rows, C),
                                        &st);
  if (st == cudaSuccess) {
    const dst::cuda::Launch by_row = dst::cuda::WarpPerRowLaunch(rows, 256);
    dst::cuda::LayerNormForwardKernel<<<by_row.blocks, by_row.threads>>>(
        arrays[0].device, arrays[1].device, arrays[2].device, rows, C, arrays[4].device,
        arrays[5].device, arrays[6].device, eps);
    dst::cuda::LayerNormInputGradKernel<<<by_row.blocks, by_row.threads>>>(
        arrays[3].device, arrays[0].device, arrays[1].device, arrays[5].device, arrays[6].device,
        rows, C, arrays[7].device);
    dst::cuda::LaunchLayerNormParamGrad(arrays[3].device, arrays[0].device, arrays[5].device,
                                        arrays[6].device, rows, C, arrays[8].device,
                                        arrays[9].device, scratch.get());
    st = cudaGetLastError();
  }
  for (Array &a : arrays)
    if (st == cudaSuccess && a.out_host != nullptr)
      st = cudaMemcpy(a.out_host, a.device, a.size * sizeof(float), cudaMemcpyDeviceToHost);
  for (Array &a : arrays) cudaFree(a.device);
  return st == cudaSuccess ? 0 : Fail(err, cap, "layernorm", st);
}

// The devices as JSON ({runtime_version, driver_version, devices: [{index, name,
// total_memory, compute_capability}], error}) into out[cap]; returns the bytes the
// JSON needs (without the terminating zero): call again with more room if larger.
extern "C" __attribute__((visibility("default"))) size_t dst_cuda_plugin_devices(char *out,
                                                                                 size_t cap) {
  const std::string json = dst::cuda::DevicesJson();
  if (out != nullptr && cap > 0) std::snprintf(out, cap, "%s", json.c_str());
  return json.size();
}

// Times one kernel (or a forward/backward pair) on device-resident random
// inputs at a GPT's shapes (cuda::BenchDims: B x T tokens of width C, H heads,
// vocabulary V), writing the mean milliseconds per call: "gelu_forward",
// "gelu_backward" and "adam" over B*T*C elements, "copy_h2d_pinned",
// "copy_h2d_pageable", "copy_d2h_pinned", "copy_d2h_pageable" of B*T*C floats, "layernorm_forward",
// "layernorm_backward" over B*T rows of C, "attention_gemm_forward" and
// "attention_gemm_backward" (attention_gemm.cu), "flash_attention_forward" and
// "flash_attention_backward" (flash_attention.cu), and the GPT kernels
// (cuda::BenchGptKernel). For bench/bench_gpu_kernels.py. Returns 0, 1 when
// there is no device, 2 on an error or an unknown kernel (err[cap]).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_kernel_bench(
    const char *kernel, long B, long T, long C, long H, long V, int iters, double *ms, char *err,
    size_t cap) {
  if (!dst::cuda::HasDevice()) return 1;
  namespace cuda = dst::cuda;
  const std::string name = kernel;
  const long rows = B * T;
  cudaError_t st;
  if (name == "gelu_forward" || name == "gelu_backward") {
    st = cuda::BenchGelu(name == "gelu_backward", rows * C, iters, ms);
  } else if (name == "layernorm_forward" || name == "layernorm_backward") {
    st = cuda::BenchLayerNorm(name == "layernorm_backward", rows, C, iters, ms);
  } else if (name == "adam") {
    st = cuda::BenchAdam(rows * C, iters, ms);
  } else if (name == "copy_h2d_pinned" || name == "copy_h2d_pageable" ||
             name == "copy_d2h_pinned" || name == "copy_d2h_pageable") {
    st = cuda::BenchCopy(name.find("h2d") != std::string::npos,
                         name.find("pinned") != std::string::npos, rows * C, iters, ms);
  } else if (name == "attention_gemm_forward" || name == "attention_gemm_backward") {
    st = cuda::BenchAttentionGemm(name == "attention_gemm_backward", cuda::BenchDims{B, T, C, H, V},
                                  iters, ms);
  } else if (name == "flash_attention_forward" || name == "flash_attention_backward") {
    st = cuda::BenchFlashAttention(name == "flash_attention_backward",
                                   cuda::BenchDims{B, T, C, H, V}, iters, ms);
  } else if (cuda::IsGptBenchKernel(kernel)) {
    st = cuda::BenchGptKernel(kernel, cuda::BenchDims{B, T, C, H, V}, iters, ms);
  } else {
    if (err != nullptr && cap > 0) std::snprintf(err, cap, "kernel bench: no kernel '%s'", kernel);
    return 2;
  }
  return st == cudaSuccess ? 0 : Fail(err, cap, kernel, st);
}
