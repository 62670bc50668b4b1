#include "core/device/cuda_devices.h"

#include <cstddef>
#include <vector>

#include "core/device/cuda_seam.h"

namespace dst {

namespace {

using DevicesFn = size_t (*)(char *out, size_t cap);

CudaDevices Query() {
  CudaDevices out;
  const Result<void *> entry = CudaPluginEntry("dst_cuda_plugin_devices");
  if (!entry.ok()) {
    out.why_none = entry.status().message();
    return out;
  }
  const auto devices = reinterpret_cast<DevicesFn>(entry.value());
  std::vector<char> text(devices(nullptr, 0) + 1);
  devices(text.data(), text.size());
  const nlohmann::json j = nlohmann::json::parse(text.data(), nullptr, false);
  if (!j.is_object()) {
    out.why_none = "the CUDA plugin answered something that is not JSON";
    return out;
  }
  out.devices = j.value("devices", nlohmann::json::array());
  out.runtime_version = j.value("runtime_version", 0);
  out.driver_version = j.value("driver_version", 0);
  if (out.devices.empty()) {
    const std::string error = j.value("error", std::string());
    out.why_none = "the CUDA runtime sees no device" + (error.empty() ? "" : ": " + error);
    if (out.driver_version == 0) out.why_none += " (no NVIDIA driver is loaded on this machine)";
  }
  return out;
}

}  // namespace

const CudaDevices &QueryCudaDevices() {
  static const CudaDevices devices = Query();
  return devices;
}

}  // namespace dst
