// The CUDA devices this process sees, through the CUDA plugin
// (libdstrain_cuda.so, core/kernels/cuda), or why it sees none: what
// `dstrain report` prints.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace dst {

struct CudaDevices {
  // [{index, name, total_memory, compute_capability}], empty when none.
  nlohmann::json devices = nlohmann::json::array();
  int runtime_version = 0, driver_version = 0;  // CUDA's encoding: 13000 = 13.0
  std::string why_none;                         // empty when a device is seen
};

// Queried once per process.
const CudaDevices &QueryCudaDevices();

}  // namespace dst
