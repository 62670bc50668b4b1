// The device seam's CUDA runtime (core/device/cuda_seam.h) on any machine:
// it loads exactly when the device query sees a device, and otherwise says
// why (no plugin in the build, no driver, no device) instead of failing later.
// Its device work is tested in tests/gpu/test_cuda_runtime.cc.
#include "core/device/cuda_seam.h"

#include <gtest/gtest.h>

#include <string>

#include "core/device/cuda_devices.h"
#include "core/device/cuda_kernels.h"

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

// The CUDA plugin this build made loads here, device or not (dlopen resolves
// every symbol): a plugin with an undefined symbol (a new .cu left out of the
// build once) skips the whole GPU suite on a GPU machine instead of failing
// it, so it is caught here, on every machine.
TEST(CudaRuntime, ThePluginThisBuildMadeLoads) {
#if DSTRAIN_HAVE_CUDA
  const std::string why = QueryCudaDevices().why_none;
  EXPECT_EQ(why.find("could not be loaded"), std::string::npos) << why;
  EXPECT_EQ(why.find("was not found"), std::string::npos) << why;
  const Result<const CudaRuntime *> runtime = CudaRuntime::Get();
  if (!runtime.ok()) {
    EXPECT_EQ(runtime.status().message().find("could not be loaded"), std::string::npos)
        << runtime.status().message();
  }
#else
  GTEST_SKIP() << "this build has no CUDA plugin";
#endif
}

// The kernel backend's table loads from this build's plugin, every entry
// filled (no device needed: the table is plain host code of the plugin).
TEST(CudaRuntime, ThePluginsKernelTableIsComplete) {
#if DSTRAIN_HAVE_CUDA
  const Status st = CudaKernels::CheckPlugin();
  EXPECT_TRUE(st.ok()) << st.message();
#else
  EXPECT_EQ(CudaKernels::CheckPlugin().code(), Code::kNotSupported);
#endif
}

}  // namespace
}  // namespace dst
