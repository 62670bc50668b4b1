// The parameter tier's swap (ZeRO 3, offload_param nvme) over several 4 MiB
// pieces: a write pass appended in odd-sized chunks, windows and reads at
// unaligned ranges across piece boundaries, read-ahead into every window,
// a patch across a boundary, an aborted pass leaving the last commit, and
// the memory it holds equal to ParamSwapBufferBytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/offload/param_swap.h"

namespace dst {
namespace {

constexpr int64_t kMiB = 1 << 20;

struct SwapFixture {
  std::string dir;
  MemoryTracker tracker;
  std::unique_ptr<ParamSwap> swap;
  ParamSwapOptions options;
  explicit SwapFixture(const std::string &name, int64_t bytes, int64_t window) {
    dir = (std::filesystem::temp_directory_path() /
           ("dstrain_param_swap_" + name + "_" + std::to_string(::getpid())))
              .string();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    options.path = dir + "/p.swap";
    options.bytes = bytes;
    options.window_bytes = window;
    options.buffer_count = 3;
    Result<std::unique_ptr<ParamSwap>> made = ParamSwap::Create(options, &tracker);
    EXPECT_TRUE(made.ok()) << made.status().message();
    if (made.ok()) swap = std::move(made).value();
  }
  ~SwapFixture() {
    swap.reset();
    std::filesystem::remove_all(dir);
  }
  // One pass writing `data` in chunks of `chunk` bytes.
  Status WritePass(const std::vector<uint8_t> &data, int64_t chunk, int64_t step) {
    DST_RETURN_IF_ERROR(swap->BeginWrite());
    for (int64_t at = 0; at < int64_t(data.size()); at += chunk)
      DST_RETURN_IF_ERROR(
          swap->Append(data.data() + at, std::min<int64_t>(chunk, int64_t(data.size()) - at)));
    return swap->EndWrite(step);
  }
  std::vector<uint8_t> ReadAll() {
    std::vector<uint8_t> out(size_t(swap->bytes()));
    Status st = swap->Read(0, swap->bytes(), out.data());
    EXPECT_TRUE(st.ok()) << st.message();
    return out;
  }
};

std::vector<uint8_t> Pattern(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(static_cast<size_t>(n));
  for (uint8_t &b : out) b = uint8_t(rng());
  return out;
}

TEST(ParamSwap, PassesWindowsReadsAndPatchesAcrossPieces) {
  const int64_t bytes = 10 * kMiB + 1234;  // three pieces, the last partial
  SwapFixture f("passes", bytes, 5 * kMiB);
  ASSERT_TRUE(f.swap);
  const std::vector<uint8_t> first = Pattern(bytes, 1);
  ASSERT_TRUE(f.WritePass(first, 777777, 1).ok());
  EXPECT_EQ(f.swap->committed_step(), 1);
  EXPECT_EQ(f.ReadAll(), first);

  // Windows at unaligned ranges crossing the piece boundaries at 4 and 8 MiB,
  // read ahead into every window first.
  const std::pair<int64_t, int64_t> ranges[] = {
      {4 * kMiB - 1001, 4 * kMiB + 3333}, {3, 5 * kMiB - 7}, {8 * kMiB - 5, bytes}};
  for (int64_t key = 0; key < 3; ++key)
    ASSERT_TRUE(f.swap->Prefetch(key, ranges[key].first, ranges[key].second).ok());
  for (int64_t key = 2; key >= 0; --key) {
    const auto [lo, hi] = ranges[key];
    Result<const uint8_t *> w = f.swap->Window(key, lo, hi);
    ASSERT_TRUE(w.ok()) << w.status().message();
    EXPECT_TRUE(std::equal(first.begin() + lo, first.begin() + hi, w.value())) << "key " << key;
  }
  // A fourth range evicts the least recently used window.
  Result<const uint8_t *> w = f.swap->Window(7, 100, 200);
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(std::equal(first.begin() + 100, first.begin() + 200, w.value()));

  // A patch across the 4 MiB boundary rewrites both pieces and commits.
  std::vector<uint8_t> patched = first;
  const std::vector<uint8_t> patch = Pattern(5000, 2);
  std::copy(patch.begin(), patch.end(), patched.begin() + (4 * kMiB - 2500));
  ASSERT_TRUE(f.swap->Write(4 * kMiB - 2500, 5000, patch.data()).ok());
  EXPECT_EQ(f.ReadAll(), patched);

  // A second pass, then a third cut short: the second's bytes remain.
  const std::vector<uint8_t> second = Pattern(bytes, 3);
  ASSERT_TRUE(f.WritePass(second, 3 * kMiB + 17, 2).ok());
  ASSERT_TRUE(f.swap->BeginWrite().ok());
  const std::vector<uint8_t> third = Pattern(6 * kMiB, 4);
  ASSERT_TRUE(f.swap->Append(third.data(), int64_t(third.size())).ok());
  f.swap->AbortWrite();
  EXPECT_EQ(f.swap->committed_step(), 2);
  EXPECT_EQ(f.ReadAll(), second);
  // A pass that does not write every byte is refused and changes nothing.
  ASSERT_TRUE(f.swap->BeginWrite().ok());
  ASSERT_TRUE(f.swap->Append(third.data(), 100).ok());
  EXPECT_NE(f.swap->EndWrite(3).message().find("wrote 100 of"), std::string::npos);
  EXPECT_EQ(f.ReadAll(), second);
}

TEST(ParamSwap, HoldsExactlyItsWindowsAndWriteBuffers) {
  SwapFixture f("memory", 10 * kMiB + 1234, 3 * kMiB + 5);
  ASSERT_TRUE(f.swap);
  const int64_t align = f.swap->file().geometry().align;
  EXPECT_EQ(f.tracker.Current(MemoryCategory::kOffload), f.swap->buffer_bytes());
  EXPECT_EQ(f.swap->buffer_bytes(), ParamSwapBufferBytes(10 * kMiB + 1234, 3 * kMiB + 5, 3, align));
  SwapFixture small("small", 1000, 300);  // one piece: its slot is the whole file's data
  ASSERT_TRUE(small.swap);
  const std::vector<uint8_t> data = Pattern(1000, 5);
  ASSERT_TRUE(small.WritePass(data, 333, 1).ok());
  EXPECT_EQ(small.ReadAll(), data);
  EXPECT_EQ(small.swap->buffer_bytes(), ParamSwapBufferBytes(1000, 300, 3, align));
}

}  // namespace
}  // namespace dst
