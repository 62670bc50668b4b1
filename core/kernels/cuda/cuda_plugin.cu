// libdstrain_cuda.so: the CUDA backend's plugin, opened with dlopen on use
// (core/runtime/cuda_devices.cc) so that libdstrain.so loads on a machine
// without CUDA. This file reports the devices this process sees (dstrain
// report) and holds the element-wise kernels, written over
// the DST_HOST_DEVICE formulas the CPU kernels use (elementwise_math.h), so
// the CPU tests exercise the math the GPU runs. Compiled for sm_80 and sm_90
// (+ PTX) with warnings as errors; not yet run on a GPU (issue 16). The
// GPT's kernels are in gpt_kernels.cu, the GEMMs (cuBLASLt) in gemm.cu.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <string>

#include "core/kernels/cuda/plugin_support.cuh"
#include "core/kernels/elementwise_math.h"
#include "core/precision/convert.h"

namespace dst::cuda {

// y[i] = gelu(x[i]) (tanh approximation, as the CPU kernel).
__global__ void GeluForwardKernel(const float *x, float *y, long n) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    y[i] = math::Gelu(x[i]);
}

// dx[i] = dy[i] * gelu'(x[i]).
__global__ void GeluBackwardKernel(const float *x, const float *dy, float *dx, long n) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    dx[i] = dy[i] * math::GeluGrad(x[i]);
}

// y[i] = x[i] rounded to bf16 (or fp16) and back: the casts the 16-bit paths use.
__global__ void RoundTripKernel(const float *x, float *y, long n, bool bf16) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    y[i] = bf16 ? BFloat16ToFloat(FloatToBFloat16(x[i])) : HalfToFloat(FloatToHalf(x[i]));
}

// Fused Adam/AdamW over a flat range (the shared formula, math::AdamElement).
__global__ void AdamKernel(float *param, const float *grad, float *exp_avg, float *exp_avg_sq,
                           long n, math::AdamConstants k) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x) {
    float p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
    math::AdamElement(p, grad[i], m, v, k);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
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

// dw, db (+=) [C]: one thread a column walks every row (a fixed order: the
// result does not depend on scheduling, as on the CPU).
__global__ void LayerNormParamGradKernel(const float *dy, const float *x, const float *mean,
                                         const float *rstd, long rows, long C, float *dw,
                                         float *db) {
  const long col = blockIdx.x * long(blockDim.x) + threadIdx.x;
  if (col >= C) return;
  float w_sum = 0, b_sum = 0;
  for (long r = 0; r < rows; ++r) {
    const float g = dy[r * C + col];
    w_sum += g * (x[r * C + col] - mean[r]) * rstd[r];
    b_sum += g;
  }
  dw[col] += w_sum;
  db[col] += b_sum;
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
    if (name == "gelu_forward")
      dst::cuda::GeluForwardKernel<<<l.blocks, l.threads>>>(da, dout, n);
    else if (name == "gelu_backward")
      dst::cuda::GeluBackwardKernel<<<l.blocks, l.threads>>>(da, db, dout, n);
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
                                                   n, *k);
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
  if (st == cudaSuccess) {
    const dst::cuda::Launch by_row = dst::cuda::WarpPerRowLaunch(rows, 256);
    const dst::cuda::Launch by_column = dst::cuda::ThreadPerColumnLaunch(C, 256);
    dst::cuda::LayerNormForwardKernel<<<by_row.blocks, by_row.threads>>>(
        arrays[0].device, arrays[1].device, arrays[2].device, rows, C, arrays[4].device,
        arrays[5].device, arrays[6].device, eps);
    dst::cuda::LayerNormInputGradKernel<<<by_row.blocks, by_row.threads>>>(
        arrays[3].device, arrays[0].device, arrays[1].device, arrays[5].device, arrays[6].device,
        rows, C, arrays[7].device);
    dst::cuda::LayerNormParamGradKernel<<<by_column.blocks, by_column.threads>>>(
        arrays[3].device, arrays[0].device, arrays[5].device, arrays[6].device, rows, C,
        arrays[8].device, arrays[9].device);
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
