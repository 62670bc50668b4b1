// The device caching allocator over a fake device resource: reuse without new
// segments after the first step, splitting and merging, per-stream reuse,
// the out-of-memory retry and its error, memory categories, bad frees.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "core/device/caching_allocator.h"

namespace dst {
namespace {

// Host memory standing in for a device: counts calls, can be given a capacity.
class FakeDevice final : public DeviceMemoryResource {
 public:
  explicit FakeDevice(size_t capacity = size_t(1) << 40) : capacity_(capacity) {}
  ~FakeDevice() override { EXPECT_TRUE(live_.empty()) << "segments leaked"; }
  Result<void *> Allocate(size_t bytes) override {
    if (held_ + bytes > capacity_) return Status(Code::kOutOfMemory, "fake device full");
    void *p = std::aligned_alloc(4096, bytes);
    live_[p] = bytes;
    held_ += bytes;
    ++allocations;
    return p;
  }
  void Free(void *ptr) override {
    held_ -= live_.at(ptr);
    live_.erase(ptr);
    std::free(ptr);
    ++frees;
  }
  std::string name() const override { return "fake:0"; }
  int allocations = 0, frees = 0;

 private:
  size_t capacity_, held_ = 0;
  std::map<void *, size_t> live_;
};

constexpr StreamId kCompute = 1, kComm = 2;
constexpr auto kAct = MemoryCategory::kActivations;

TEST(CachingAllocator, AStepAllocatesNothingAfterTheFirst) {
  FakeDevice device;
  CachingAllocator alloc(&device, nullptr);
  const std::vector<size_t> step = {3000, 700000, 5 << 20, 128, 3 << 20, 40000};
  for (int s = 0; s < 5; ++s) {
    std::vector<void *> live;
    for (size_t bytes : step) live.push_back(alloc.Allocate(bytes, kCompute, kAct).value());
    for (void *p : live) ASSERT_TRUE(alloc.Free(p).ok());
    if (s == 0) {
      EXPECT_GT(device.allocations, 0);
    }
  }
  const int after_first = device.allocations;
  std::vector<void *> live;
  for (size_t bytes : step) live.push_back(alloc.Allocate(bytes, kCompute, kAct).value());
  for (void *p : live) ASSERT_TRUE(alloc.Free(p).ok());
  EXPECT_EQ(device.allocations, after_first);
  EXPECT_EQ(alloc.stats().allocated_bytes, 0);
  EXPECT_GT(alloc.stats().cache_hits, 0);
}

TEST(CachingAllocator, SmallBlocksShareASegmentAndMergeWhenFreed) {
  FakeDevice device;
  CachingAllocator alloc(&device, nullptr);
  void *a = alloc.Allocate(1000, kCompute, kAct).value();
  void *b = alloc.Allocate(1000, kCompute, kAct).value();
  void *c = alloc.Allocate(1000, kCompute, kAct).value();
  EXPECT_EQ(device.allocations, 1);                                  // one 2 MiB segment
  EXPECT_EQ(static_cast<char *>(b) - static_cast<char *>(a), 1024);  // rounded to 512
  EXPECT_EQ(static_cast<char *>(c) - static_cast<char *>(b), 1024);
  ASSERT_TRUE(alloc.Free(a).ok());
  ASSERT_TRUE(alloc.Free(c).ok());
  ASSERT_TRUE(alloc.Free(b).ok());  // joins a and c's blocks and the tail into one
  // The whole segment is one free block again: a request of all of it fits.
  void *whole = alloc.Allocate(CachingAllocator::kSmallLimit, kCompute, kAct).value();
  EXPECT_EQ(whole, a);
  EXPECT_EQ(device.allocations, 1);
  ASSERT_TRUE(alloc.Free(whole).ok());
  alloc.EmptyCache();
  EXPECT_EQ(device.frees, 1);
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
}

TEST(CachingAllocator, LargeBlocksAreSplitOnlyForARemainderWorthKeeping) {
  FakeDevice device;
  CachingAllocator alloc(&device, nullptr);
  void *big = alloc.Allocate(8 << 20, kCompute, kAct).value();
  ASSERT_TRUE(alloc.Free(big).ok());
  void *part = alloc.Allocate(5 << 20, kCompute, kAct).value();  // 3 MiB left: split
  void *rest = alloc.Allocate(3 << 20, kCompute, kAct).value();
  EXPECT_EQ(part, big);
  EXPECT_EQ(static_cast<char *>(rest) - static_cast<char *>(part), 5 << 20);
  EXPECT_EQ(device.allocations, 1);
  ASSERT_TRUE(alloc.Free(part).ok());
  ASSERT_TRUE(alloc.Free(rest).ok());
  void *most = alloc.Allocate((8 << 20) - (512 << 10), kCompute, kAct).value();  // 512 KiB left
  EXPECT_EQ(alloc.stats().allocated_bytes, 8 << 20);  // not split: the whole block is handed out
  ASSERT_TRUE(alloc.Free(most).ok());
}

TEST(CachingAllocator, AFreedBlockIsReusedOnlyByItsStream) {
  FakeDevice device;
  CachingAllocator alloc(&device, nullptr);
  void *p = alloc.Allocate(4 << 20, kCompute, kAct).value();
  ASSERT_TRUE(alloc.Free(p).ok());
  void *q = alloc.Allocate(4 << 20, kComm, kAct).value();
  EXPECT_NE(p, q);
  EXPECT_EQ(device.allocations, 2);
  void *r = alloc.Allocate(4 << 20, kCompute, kAct).value();
  EXPECT_EQ(p, r);
  ASSERT_TRUE(alloc.Free(q).ok());
  ASSERT_TRUE(alloc.Free(r).ok());
}

TEST(CachingAllocator, OutOfMemoryReturnsTheCacheRetriesThenNamesTheBytes) {
  FakeDevice device(10 << 20);
  CachingAllocator alloc(&device, nullptr);
  void *p = alloc.Allocate(6 << 20, kComm, kAct).value();
  ASSERT_TRUE(alloc.Free(p).ok());  // cached for the comm stream
  // 6 MiB cached + 6 MiB new > 10 MiB: the cache goes back, the retry fits.
  void *q = alloc.Allocate(6 << 20, kCompute, kAct).value();
  EXPECT_EQ(alloc.stats().oom_retries, 1);
  EXPECT_EQ(alloc.stats().reserved_bytes, 6 << 20);
  Result<void *> too_much = alloc.Allocate(6 << 20, kCompute, kAct);
  ASSERT_FALSE(too_much.ok());
  EXPECT_EQ(too_much.status().code(), Code::kOutOfMemory);
  const std::string m = too_much.status().message();
  EXPECT_NE(m.find("fake:0"), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(6 << 20) + " bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("train_micro_batch_size_per_gpu"), std::string::npos) << m;
  ASSERT_TRUE(alloc.Free(q).ok());
}

TEST(CachingAllocator, HandedOutBytesAreChargedToTheirCategory) {
  FakeDevice device;
  MemoryTracker tracker;
  CachingAllocator alloc(&device, &tracker);
  void *w = alloc.Allocate(1000, kCompute, MemoryCategory::kParameters).value();
  void *a = alloc.Allocate(3 << 20, kCompute, kAct).value();
  EXPECT_EQ(tracker.Current(MemoryCategory::kParameters), 1024);
  // The block handed out, not the request: a 4 MiB segment whose 1 MiB rest is
  // too small to split off.
  EXPECT_EQ(tracker.Current(kAct), 4 << 20);
  ASSERT_TRUE(alloc.Free(w).ok());
  ASSERT_TRUE(alloc.Free(a).ok());
  EXPECT_EQ(tracker.Current(MemoryCategory::kParameters), 0);
  EXPECT_EQ(tracker.Current(kAct), 0);
  EXPECT_EQ(alloc.stats().peak_allocated_bytes, 1024 + (4 << 20));
}

TEST(CachingAllocator, BadFreesAndEmptyRequestsAreErrors) {
  FakeDevice device;
  CachingAllocator alloc(&device, nullptr);
  int local = 0;
  EXPECT_EQ(alloc.Free(&local).code(), Code::kInvalidArgument);
  void *p = alloc.Allocate(100, kCompute, kAct).value();
  ASSERT_TRUE(alloc.Free(p).ok());
  EXPECT_EQ(alloc.Free(p).code(), Code::kInvalidArgument);  // twice
  EXPECT_FALSE(alloc.Allocate(0, kCompute, kAct).ok());
}

}  // namespace
}  // namespace dst
