// The device seam's CUDA runtime on a device: the CachingAllocator over
// cudaMalloc (a step allocates nothing after the first; out-of-memory is
// named and retried), streams ordered by events, errors named. Skipped
// without the plugin or a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/device/caching_allocator.h"
#include "core/device/cuda_seam.h"

namespace dst {
namespace {

#define DST_CUDA_RUNTIME_OR_SKIP(name)                                              \
  const Result<const CudaRuntime *> name##_or = CudaRuntime::Get();                 \
  if (!name##_or.ok()) GTEST_SKIP() << "skipped: " << name##_or.status().message(); \
  const CudaRuntime &name = *name##_or.value()

TEST(CudaRuntimeOnDevice, CachingAllocatorAllocatesNothingAfterTheFirstStep) {
  DST_CUDA_RUNTIME_OR_SKIP(runtime);
  CudaMemoryResource resource(runtime, 0);
  MemoryTracker tracker;
  Result<CudaStream> stream = CudaStream::Create(runtime, 0);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  int64_t segments_after_first = -1;
  {
    CachingAllocator allocator(&resource, &tracker);
    const size_t sizes[] = {1000, size_t(3) << 20, 512, size_t(70) << 20, 4096};
    for (int step = 0; step < 4; ++step) {
      std::vector<void *> blocks;
      for (size_t bytes : sizes) {
        Result<void *> p =
            allocator.Allocate(bytes, stream.value().id(), MemoryCategory::kActivations);
        ASSERT_TRUE(p.ok()) << p.status().message();
        ASSERT_TRUE(stream.value().FillAsync(p.value(), step + 1, bytes).ok());
        blocks.push_back(p.value());
      }
      std::vector<uint8_t> back(sizes[3]);
      ASSERT_TRUE(stream.value()
                      .CopyAsync(back.data(), blocks[3], back.size(), DST_CUDA_DEVICE_TO_HOST)
                      .ok());
      ASSERT_TRUE(stream.value().Synchronize().ok());
      for (size_t i = 0; i < back.size(); i += 4093) ASSERT_EQ(back[i], uint8_t(step + 1)) << i;
      EXPECT_GT(tracker.Current(MemoryCategory::kActivations), int64_t(70) << 20);
      for (void *p : blocks) ASSERT_TRUE(allocator.Free(p).ok());
      EXPECT_EQ(tracker.Current(MemoryCategory::kActivations), 0);
      if (step == 0) segments_after_first = allocator.stats().segment_allocations;
    }
    EXPECT_EQ(allocator.stats().segment_allocations, segments_after_first);
    EXPECT_GE(allocator.stats().cache_hits, 3 * 5);
    allocator.EmptyCache();
    EXPECT_EQ(allocator.stats().reserved_bytes, 0);
  }
}

TEST(CudaRuntimeOnDevice, OutOfMemoryIsRetriedOnceThenNamed) {
  DST_CUDA_RUNTIME_OR_SKIP(runtime);
  CudaMemoryResource resource(runtime, 0);
  CachingAllocator allocator(&resource, nullptr);
  Result<void *> small = allocator.Allocate(1 << 20, 0, MemoryCategory::kActivations);
  ASSERT_TRUE(small.ok());
  ASSERT_TRUE(allocator.Free(small.value()).ok());
  const size_t huge = size_t(1) << 50;  // 1 PiB
  Result<void *> p = allocator.Allocate(huge, 0, MemoryCategory::kActivations);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kOutOfMemory) << p.status().message();
  EXPECT_NE(p.status().message().find(std::to_string(huge)), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("cuda:0"), std::string::npos) << p.status().message();
  EXPECT_EQ(allocator.stats().oom_retries, 1);
  // The device is still usable after the refusal.
  Result<void *> again = allocator.Allocate(1 << 20, 0, MemoryCategory::kActivations);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_TRUE(allocator.Free(again.value()).ok());
}

// Stream B copies what stream A wrote only after A's event: A queues many
// fills (the last writes 7), B waits for the event and copies to the host.
TEST(CudaRuntimeOnDevice, AnEventOrdersTwoStreams) {
  DST_CUDA_RUNTIME_OR_SKIP(runtime);
  CudaMemoryResource resource(runtime, 0);
  const size_t bytes = size_t(256) << 20;
  Result<void *> buffer = resource.Allocate(bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status().message();
  Result<CudaStream> a = CudaStream::Create(runtime, 0), b = CudaStream::Create(runtime, 0);
  Result<CudaEvent> written = CudaEvent::Create(runtime, 0);
  ASSERT_TRUE(a.ok() && b.ok() && written.ok());
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(a.value().FillAsync(buffer.value(), 1, bytes).ok());
  ASSERT_TRUE(a.value().FillAsync(buffer.value(), 7, bytes).ok());
  ASSERT_TRUE(written.value().Record(a.value()).ok());
  ASSERT_TRUE(b.value().Wait(written.value()).ok());
  std::vector<uint8_t> host(bytes);
  ASSERT_TRUE(
      b.value().CopyAsync(host.data(), buffer.value(), bytes, DST_CUDA_DEVICE_TO_HOST).ok());
  ASSERT_TRUE(b.value().Synchronize().ok());
  Result<bool> done = written.value().Done();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done.value());
  for (size_t i = 0; i < bytes; i += 65521) ASSERT_EQ(host[i], 7) << i;
  EXPECT_EQ(host[bytes - 1], 7);
  resource.Free(buffer.value());
}

// CudaDeviceMemory's asynchronous copies run on a copy stream of their own,
// after the compute stream's work queued before them (the last fill is what
// arrives); OrderAfterCopies holds the compute stream's next work behind
// them (a fill queued after it does not reach the copy).
TEST(CudaRuntimeOnDevice, AsynchronousCopiesRunOnACopyStreamInOrder) {
  DST_CUDA_RUNTIME_OR_SKIP(runtime);
  Result<CudaStream> compute = CudaStream::Create(runtime, 0);
  ASSERT_TRUE(compute.ok());
  CudaDeviceMemory memory(compute.value());
  const size_t bytes = size_t(64) << 20;
  void *x = memory.Allocate(bytes);
  void *host = memory.AllocateHost(bytes);
  ASSERT_TRUE(x != nullptr && host != nullptr) << memory.status().message();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(compute.value().FillAsync(x, 1, bytes).ok());
  ASSERT_TRUE(compute.value().FillAsync(x, 7, bytes).ok());
  const uint64_t first = memory.DownloadAsync(host, x, bytes);
  memory.OrderAfterCopies();
  ASSERT_TRUE(compute.value().FillAsync(x, 9, bytes).ok());
  memory.WaitCopy(first);
  ASSERT_TRUE(memory.status().ok()) << memory.status().message();
  const auto *got = static_cast<const uint8_t *>(host);
  for (size_t i = 0; i < bytes; i += 65521) ASSERT_EQ(got[i], 7) << i;
  ASSERT_TRUE(compute.value().Synchronize().ok());
  memory.Download(host, x, 4096);
  EXPECT_EQ(got[0], 9);
  memory.FreeHost(host);
  memory.Free(x);
}

// Page-locked host memory to the device and back through async copies on a
// stream; a moved-from buffer owns nothing.
TEST(CudaRuntimeOnDevice, PinnedHostMemoryRoundTripsThroughTheDevice) {
  DST_CUDA_RUNTIME_OR_SKIP(runtime);
  const size_t n = size_t(8) << 20;  // floats
  Result<PinnedHostBuffer> in = PinnedHostBuffer::Allocate(runtime, n * sizeof(float));
  Result<PinnedHostBuffer> out = PinnedHostBuffer::Allocate(runtime, n * sizeof(float));
  ASSERT_TRUE(in.ok() && out.ok()) << in.status().message();
  float *src = static_cast<float *>(in.value().data());
  for (size_t i = 0; i < n; ++i) src[i] = float(i % 1000003) * 0.5f;
  CudaMemoryResource resource(runtime, 0);
  Result<void *> device = resource.Allocate(n * sizeof(float));
  Result<CudaStream> stream = CudaStream::Create(runtime, 0);
  ASSERT_TRUE(device.ok() && stream.ok());
  ASSERT_TRUE(stream.value()
                  .CopyAsync(device.value(), src, n * sizeof(float), DST_CUDA_HOST_TO_DEVICE)
                  .ok());
  ASSERT_TRUE(
      stream.value()
          .CopyAsync(out.value().data(), device.value(), n * sizeof(float), DST_CUDA_DEVICE_TO_HOST)
          .ok());
  ASSERT_TRUE(stream.value().Synchronize().ok());
  const float *dst = static_cast<const float *>(out.value().data());
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(dst[i], src[i]) << i;
  EXPECT_EQ(dst[n - 1], src[n - 1]);
  PinnedHostBuffer moved = std::move(in).value();
  EXPECT_EQ(moved.data(), static_cast<void *>(src));
  EXPECT_EQ(moved.size(), n * sizeof(float));
  EXPECT_EQ(in.value().data(), nullptr);  // NOLINT(bugprone-use-after-move): checked on purpose
  resource.Free(device.value());
}

// A failed call names itself and the device (calls on a device that does not
// exist: they fail before any work is queued, so nothing else is disturbed).
TEST(CudaRuntimeOnDevice, AFailedCallIsNamed) {
  DST_CUDA_RUNTIME_OR_SKIP(runtime);
  const int missing = runtime.device_count() + 7;
  Result<CudaStream> stream = CudaStream::Create(runtime, missing);
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), Code::kInternal);
  EXPECT_NE(stream.status().message().find("creating a stream on cuda:" + std::to_string(missing)),
            std::string::npos)
      << stream.status().message();
  CudaMemoryResource resource(runtime, missing);
  Result<void *> p = resource.Allocate(4096);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(
      p.status().message().find("cudaMalloc of 4096 bytes on cuda:" + std::to_string(missing)),
      std::string::npos)
      << p.status().message();
}

}  // namespace
}  // namespace dst
