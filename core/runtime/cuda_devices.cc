#include "core/runtime/cuda_devices.h"

#include <cstddef>
#include <vector>

#include "core/runtime/plugin.h"

namespace dst {

namespace {

using DevicesFn = size_t (*)(char *out, size_t cap);

CudaDevices Query() {
  CudaDevices out;
#if !DSTRAIN_HAVE_CUDA
  out.why_none = "this build has no CUDA backend (nvcc was not found when it was built)";
#else
  const OpenedPlugin plugin =
      OpenPlugin({"libdstrain_cuda.so", "DSTRAIN_CUDA_PLUGIN", DSTRAIN_CUDA_PLUGIN_BUILD_PATH,
                  "dst_cuda_plugin_devices", "the CUDA runtime"});
  if (plugin.entry == nullptr) {
    out.why_none = plugin.error;
    return out;
  }
  const auto devices = reinterpret_cast<DevicesFn>(plugin.entry);
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
#endif
  return out;
}

}  // namespace

const CudaDevices &QueryCudaDevices() {
  static const CudaDevices devices = Query();
  return devices;
}

}  // namespace dst
