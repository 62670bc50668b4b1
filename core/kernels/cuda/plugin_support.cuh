// What every part of the CUDA plugin shares: launch shapes (launch.h), warp reductions,
// and the host-side plumbing of its test entry points (the GPU test suite
// passes host arrays; each entry point copies them to device 0, runs its
// kernels and copies the results back).
#pragma once

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

}  // namespace dst::cuda
