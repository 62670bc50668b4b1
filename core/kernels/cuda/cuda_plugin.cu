// libdstrain_cuda.so: the CUDA backend's plugin, opened with dlopen on use
// (core/runtime/cuda_devices.cc) so that libdstrain.so loads on a machine
// without CUDA. So far it reports the devices this process sees (dstrain
// report) and holds the first kernels, the element-wise ones, written over
// the DST_HOST_DEVICE formulas the CPU kernels use (elementwise_math.h), so
// the CPU tests exercise the math the GPU runs. Compiled for sm_80 and sm_90
// (+ PTX) with warnings as errors; not yet run on a GPU (issue 16).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <string>

#include "core/kernels/elementwise_math.h"

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

// The devices as JSON ({runtime_version, driver_version, devices: [{index, name,
// total_memory, compute_capability}], error}) into out[cap]; returns the bytes the
// JSON needs (without the terminating zero): call again with more room if larger.
extern "C" __attribute__((visibility("default"))) size_t dst_cuda_plugin_devices(char *out,
                                                                                  size_t cap) {
  const std::string json = dst::cuda::DevicesJson();
  if (out != nullptr && cap > 0) std::snprintf(out, cap, "%s", json.c_str());
  return json.size();
}
