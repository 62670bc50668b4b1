// The device seam's CUDA runtime (core/runtime/cuda_runtime.h) on any machine:
// it loads exactly when the device query sees a device, and otherwise says
// why (no plugin in the build, no driver, no device) instead of failing later.
// Its device work is tested in tests/gpu/test_cuda_runtime.cc.
#include "core/runtime/cuda_runtime.h"

#include <gtest/gtest.h>

#include "core/runtime/cuda_devices.h"

namespace dst {
namespace {

TEST(CudaRuntime, LoadsExactlyWhenTheDeviceQuerySeesADevice) {
  const CudaDevices &devices = QueryCudaDevices();
  const Result<const CudaRuntime *> runtime = CudaRuntime::Get();
  if (devices.devices.empty()) {
    ASSERT_FALSE(runtime.ok());
    EXPECT_EQ(runtime.status().code(), Code::kNotSupported);
    EXPECT_FALSE(runtime.status().message().empty());
  } else {
    ASSERT_TRUE(runtime.ok()) << runtime.status().message();
    EXPECT_EQ(runtime.value()->device_count(), int(devices.devices.size()));
  }
}

}  // namespace
}  // namespace dst
