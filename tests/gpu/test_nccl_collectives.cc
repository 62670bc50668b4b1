// The NCCL backend on device buffers: every collective of the Communicator
// interface, fp32 and 16-bit, on a one-rank group (one GPU cannot host two
// NCCL ranks), checked bit for bit after a round trip through the device —
// a one-rank collective leaves its data as it was, so a wrong offset, count,
// type or stream shows as changed or unwritten elements. Skipped without
// NCCL or a device; the multi-rank checks need a machine with several GPUs.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/comm/nccl_communicator.h"
#include "core/comm/store.h"

#if DSTRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace dst {
namespace {

#if DSTRAIN_HAVE_NCCL

// count elements of T on the device, freed on scope exit.
template <typename T>
struct DeviceBuffer {
  T *data = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(const std::vector<T> &host) : count(host.size()) {
    if (cudaMalloc(&data, count * sizeof(T)) == cudaSuccess)
      cudaMemcpy(data, host.data(), count * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(data); }
  std::vector<T> Read() const {
    std::vector<T> host(count);
    cudaMemcpy(host.data(), data, count * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
};

class NcclOneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (!NcclAvailable())
      GTEST_SKIP() << "skipped: no NCCL plugin (" << NcclUnavailableReason() << ")";
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
      GTEST_SKIP() << "skipped: no CUDA device";
    TcpStoreOptions so;
    so.is_server = true;
    so.port = 0;
    so.timeout = std::chrono::seconds(10);
    Result<std::unique_ptr<Store>> store = ConnectTcpStore(so);
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(store).value();
    NcclOptions o;
    o.name = "nccl-test";
    Result<std::unique_ptr<Communicator>> comm = CreateNcclCommunicator(*store_, o);
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    comm_ = std::move(comm).value();
  }
  std::unique_ptr<Store> store_;
  std::unique_ptr<Communicator> comm_;
};

std::vector<float> Ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25f * float(i) - 3.0f;
  return v;
}

std::vector<uint16_t> Bits(size_t n) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint16_t(0x3c00 + (i % 977));  // finite fp16 and bf16
  return v;
}

// Stream semantics: the collective is ordered after what a compute stream
// queued (OrderAfter) and the compute stream waits on its completion event,
// with no host wait in between: the fill queued on the compute stream is
// what the all-reduce sees, and the copy queued after the wait sees its result.
TEST_F(NcclOneRank, ACollectiveOrdersAfterAndCompletesOnStreams) {
  const size_t n = 1 << 20;
  DeviceBuffer<float> buf(std::vector<float>(n, 0.0f));
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf.data, 0x3f, n * sizeof(float), compute), cudaSuccess);
  ASSERT_TRUE(comm_->OrderAfter(compute).ok());
  std::unique_ptr<Work> work = comm_->AllReduceSum(buf.data, int64_t(n));
  ASSERT_NE(work->CompletionEvent(), nullptr);
  ASSERT_EQ(cudaStreamWaitEvent(compute, static_cast<cudaEvent_t>(work->CompletionEvent()), 0),
            cudaSuccess);
  std::vector<float> back(n);
  ASSERT_EQ(
      cudaMemcpyAsync(back.data(), buf.data, n * sizeof(float), cudaMemcpyDeviceToHost, compute),
      cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  EXPECT_TRUE(work->Wait().ok());
  float want;
  std::memset(&want, 0x3f, sizeof want);
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(back[i], want) << i;
  ASSERT_TRUE(comm_->OrderAfter(nullptr).ok());
  cudaStreamDestroy(compute);
}

TEST_F(NcclOneRank, Fp32CollectivesLeaveTheDataAsItWas) {
  const std::vector<float> host = Ramp(100003);
  DeviceBuffer<float> buf(host);
  ASSERT_NE(buf.data, nullptr);
  const int64_t n = int64_t(host.size());
  ASSERT_TRUE(comm_->AllReduceSum(buf.data, n)->Wait().ok());
  ASSERT_TRUE(comm_->ReduceSum(buf.data, n, 0)->Wait().ok());
  ASSERT_TRUE(comm_->ReduceScatterSum(buf.data, n)->Wait().ok());
  ASSERT_TRUE(comm_->AllGather(buf.data, n)->Wait().ok());
  ASSERT_TRUE(comm_->Broadcast(buf.data, n, 0)->Wait().ok());
  ASSERT_TRUE(comm_->Barrier().ok());
  EXPECT_EQ(buf.Read(), host);
}

TEST_F(NcclOneRank, SixteenBitCollectivesLeaveTheDataAsItWas) {
  const std::vector<uint16_t> host = Bits(65537);
  DeviceBuffer<uint16_t> buf(host);
  ASSERT_NE(buf.data, nullptr);
  const int64_t n = int64_t(host.size());
  ASSERT_TRUE(comm_->AllReduceSum16(buf.data, n, Half::kFp16)->Wait().ok());
  ASSERT_TRUE(comm_->AllReduceSum16(buf.data, n, Half::kBf16)->Wait().ok());
  ASSERT_TRUE(comm_->ReduceSum16(buf.data, n, 0, Half::kBf16)->Wait().ok());
  ASSERT_TRUE(comm_->AllGather16(buf.data, n)->Wait().ok());
  ASSERT_TRUE(comm_->Broadcast16(buf.data, n, 0)->Wait().ok());
  EXPECT_EQ(buf.Read(), host);
}

TEST_F(NcclOneRank, WorkCompletesWithoutBlockingAndReportsDone) {
  DeviceBuffer<float> buf(Ramp(1 << 20));
  std::unique_ptr<Work> work = comm_->AllReduceSum(buf.data, int64_t(buf.count));
  EXPECT_TRUE(work->Wait().ok());
  EXPECT_TRUE(work->Test());
}

#else

TEST(NcclOneRank, SkippedWithoutNccl) {
  GTEST_SKIP() << "skipped: built without NCCL";
}

#endif

}  // namespace
}  // namespace dst
