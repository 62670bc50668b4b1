// The NVMe tier's parts: the asynchronous file (both engines, chunking,
// short transfers continued, errors naming file / offset / errno), the swap
// file (full disk at start-up, a second user refused) and the store (passes
// committed or forgotten, every read checked against its commit's checksum,
// resident memory = its piece buffers).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/common/test_hooks.h"
#include "core/offload/async_file.h"
#include "core/offload/nvme_state_store.h"
#include "core/offload/slot_checksum.h"
#include "core/offload/swap_file.h"

namespace dst {
namespace {

std::string TempDir(const std::string &name) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("dstrain_offload_" + name + "_" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

AioConfig SmallBlocks() {
  AioConfig aio;
  aio.block_size = 4096;  // many chunks per request
  aio.queue_depth = 2;    // fewer slots than chunks
  return aio;
}

class AsyncFileTest : public ::testing::TestWithParam<const char *> {};

TEST_P(AsyncFileTest, RoundTripsInChunksAndContinuesShortTransfers) {
  const std::string dir = TempDir(std::string("async_") + GetParam());
  const std::string path = dir + "/f";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  Result<std::unique_ptr<AsyncFile>> file = OpenAsyncFile(path, fd, SmallBlocks(), GetParam());
  ASSERT_TRUE(file.ok()) << file.status().message();
  AsyncFile &io = *file.value();
  EXPECT_STREQ(io.engine(), std::string(GetParam()) == "pread" ? "pread/pwrite" : "io_uring");
  const size_t n = 10 * 4096 + 512;  // a tail shorter than a block
  std::vector<char> out(n), in(n, 0);
  std::mt19937 rng(7);
  for (char &c : out) c = char(rng());
  Result<uint64_t> w = io.Submit({IoOp::kWrite, out.data(), n, 8192, IoFault::kShortThenRest});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(io.Wait(w.value()).ok());
  Result<uint64_t> r = io.Submit({IoOp::kRead, in.data(), n, 8192, IoFault::kShortThenRest});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(io.Wait(r.value()).ok());
  EXPECT_EQ(in, out);
  EXPECT_EQ(io.counters().write_bytes, int64_t(n));
  EXPECT_EQ(io.counters().read_bytes, int64_t(n));
  EXPECT_EQ(io.counters().short_transfers, 2);
  file.value().reset();
  ::close(fd);
  std::filesystem::remove_all(dir);
}

TEST_P(AsyncFileTest, FailuresNameTheFileTheOffsetAndErrno) {
  const std::string dir = TempDir(std::string("async_err_") + GetParam());
  const std::string path = dir + "/f";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  Result<std::unique_ptr<AsyncFile>> file = OpenAsyncFile(path, fd, SmallBlocks(), GetParam());
  ASSERT_TRUE(file.ok());
  AsyncFile &io = *file.value();
  std::vector<char> buf(3 * 4096, 1);
  // A write that stops half-way and then finds the disk full.
  Result<uint64_t> w =
      io.Submit({IoOp::kWrite, buf.data(), buf.size(), 4096, IoFault::kShortThenNoSpace});
  Status st = io.Wait(w.value());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("write of 2048 bytes at offset 6144 of " + path), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("(errno 28)"), std::string::npos) << st.message();
  // EIO on a read.
  Result<uint64_t> r = io.Submit({IoOp::kRead, buf.data(), 4096, 0, IoFault::kError});
  st = io.Wait(r.value());
  EXPECT_NE(st.message().find("read of 4096 bytes at offset 0 of " + path), std::string::npos);
  EXPECT_NE(st.message().find("Input/output error (errno 5)"), std::string::npos);
  // Reading past the end: the file ends there.
  r = io.Submit({IoOp::kRead, buf.data(), 4096, 1 << 20});
  st = io.Wait(r.value());
  EXPECT_NE(st.message().find("the file ends there"), std::string::npos) << st.message();
  file.value().reset();
  ::close(fd);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Engines, AsyncFileTest, ::testing::Values("pread", "io_uring"));

TEST(SlotChecksum, TheCrc32InstructionAndTheTableAgreeAndAFlipShows) {
  std::mt19937 rng(3);
  std::vector<unsigned char> bytes(1 << 16);
  for (unsigned char &b : bytes) b = static_cast<unsigned char>(rng());
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(31), size_t(33), size_t(4096),
                   bytes.size()})
    EXPECT_EQ(SlotChecksum(bytes.data(), n), SlotChecksumPortable(bytes.data(), n)) << n;
  const uint64_t before = SlotChecksum(bytes.data(), bytes.size());
  bytes[12345] ^= 0x10;
  EXPECT_NE(SlotChecksum(bytes.data(), bytes.size()), before);
  // Zeros of different lengths differ (the length is mixed in).
  const std::vector<unsigned char> zeros(64, 0);
  EXPECT_NE(SlotChecksum(zeros.data(), 32), SlotChecksum(zeros.data(), 64));
}

TEST(SwapFile, AFullDiskAtStartUpNamesTheBytesNeededAndFree) {
  const std::string dir = TempDir("full");
  // 1e13 elements x 3 tensors x 2 slots: far beyond any disk here.
  Result<std::unique_ptr<SwapFile>> file =
      SwapFile::Create(dir + "/s.swap", int64_t(1e13), int64_t(1e8), 3, AioConfig{}, "auto");
  ASSERT_FALSE(file.ok());
  const std::string &m = file.status().message();
  EXPECT_NE(m.find("needs 240000"), std::string::npos) << m;
  EXPECT_NE(m.find("GiB) free"), std::string::npos) << m;
  EXPECT_NE(m.find(dir), std::string::npos) << m;
  std::filesystem::remove_all(dir);
}

TEST(SwapFile, ASecondUserOfTheFileIsRefused) {
  const std::string dir = TempDir("lock");
  Result<std::unique_ptr<SwapFile>> first =
      SwapFile::Create(dir + "/s.swap", 1000, 100, 3, AioConfig{}, "auto");
  ASSERT_TRUE(first.ok()) << first.status().message();
  Result<std::unique_ptr<SwapFile>> second =
      SwapFile::Create(dir + "/s.swap", 1000, 100, 3, AioConfig{}, "auto");
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("in use by another process"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// A store of 3 tensors x 10000 elements in pieces of 3000 (the last 1000).
struct StoreFixture {
  std::string dir;
  MemoryTracker tracker;
  std::unique_ptr<NvmeStateStore> store;
  explicit StoreFixture(const std::string &name, bool pipeline = true) : dir(TempDir(name)) {
    NvmeStoreOptions options;
    options.path = dir + "/s.swap";
    options.piece_elements = 3000;
    options.buffer_count = 3;
    options.pipeline_read = options.pipeline_write = pipeline;
    store = std::make_unique<NvmeStateStore>(
        std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"}, 10000, &tracker, options);
    Status st = store->Open();
    EXPECT_TRUE(st.ok()) << st.message();
  }
  ~StoreFixture() {
    store.reset();
    std::filesystem::remove_all(dir);
  }
  // One pass adding `delta` to every element of every tensor.
  Status AddToAll(float delta, int64_t step, int64_t fail_after_pieces = -1) {
    DST_RETURN_IF_ERROR(store->BeginPass(step));
    for (int64_t c = 0, p = 0; c < 10000; c += 3000, ++p) {
      if (p == fail_after_pieces) {
        store->AbortPass();
        return IoError("stopped");
      }
      StatePiece piece;
      DST_RETURN_IF_ERROR(store->Acquire(c, std::min<int64_t>(3000, 10000 - c), &piece));
      for (int k = 0; k < 3; ++k)
        for (int64_t i = 0; i < piece.count; ++i) piece.tensors[k][i] += delta;
      DST_RETURN_IF_ERROR(store->Release(piece, true));
    }
    return store->EndPass();
  }
  std::vector<float> Tensor(size_t k) {
    std::vector<float> out(10000);
    Status st = store->Read(k, 0, 10000, out.data());
    EXPECT_TRUE(st.ok()) << st.message();
    return out;
  }
};

TEST(NvmeStateStore, PassesCommitAndAnAbortedPassLeavesTheLastCommit) {
  for (bool pipeline : {false, true}) {
    StoreFixture f(pipeline ? "passes_p" : "passes", pipeline);
    std::vector<float> ramp(10000);
    std::iota(ramp.begin(), ramp.end(), 0.0f);
    ASSERT_TRUE(f.store->Write(1, 0, 10000, ramp.data()).ok());
    ASSERT_TRUE(f.AddToAll(1.0f, 1).ok());
    ASSERT_TRUE(f.AddToAll(1.0f, 2).ok());
    EXPECT_EQ(f.store->committed_step(), 2);
    // Two pieces updated and written to the other slot, then the pass fails.
    EXPECT_FALSE(f.AddToAll(100.0f, 3, /*fail_after_pieces=*/2).ok());
    EXPECT_EQ(f.store->committed_step(), 2);
    std::vector<float> expect = ramp;
    for (float &x : expect) x += 2.0f;
    EXPECT_EQ(f.Tensor(1), expect);
    EXPECT_EQ(f.Tensor(0), std::vector<float>(10000, 2.0f));
    // And the next pass starts from there.
    ASSERT_TRUE(f.AddToAll(1.0f, 3).ok());
    EXPECT_EQ(f.Tensor(2), std::vector<float>(10000, 3.0f));
  }
}

TEST(NvmeStateStore, ResidentMemoryIsItsPieceBuffers) {
  StoreFixture f("memory");
  // 3 tensors x 3000 floats = 36000 bytes, rounded up to 4 KiB: 36864 per buffer.
  const int64_t slot = f.store->geometry().slot_bytes;
  EXPECT_EQ(slot % f.store->geometry().align, 0);
  EXPECT_GE(slot, 36000);
  EXPECT_EQ(f.tracker.Current(MemoryCategory::kOffload), 3 * slot);
  EXPECT_EQ(f.tracker.Current(MemoryCategory::kOptimizerState), 0);
  ASSERT_TRUE(f.AddToAll(1.0f, 1).ok());
  EXPECT_EQ(f.tracker.Peak(MemoryCategory::kOffload), 3 * slot);
}

TEST(NvmeStateStore, ACorruptSlotIsNamedOnRead) {
  StoreFixture f("corrupt");
  ASSERT_TRUE(f.AddToAll(1.0f, 1).ok());
  // Step 1 wrote slot 1 of every piece: flip a byte of piece 1's.
  const SwapGeometry &g = f.store->geometry();
  const int fd = ::open((f.dir + "/s.swap").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const char junk = 0x5a;
  ASSERT_EQ(::pwrite(fd, &junk, 1, g.SlotOffset(1, 1) + 100), 1);
  ::close(fd);
  std::vector<float> out(10000);
  Status st = f.store->Read(0, 0, 10000, out.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("is corrupt: piece 1 (slot 1"), std::string::npos) << st.message();
  st = f.AddToAll(1.0f, 2);
  EXPECT_NE(st.message().find("is corrupt"), std::string::npos) << st.message();
}

// A process killed with SIGKILL in the middle of a pass (pieces written to
// their other slots, no commit) leaves the swap file at its last commit: a
// store that resumes from it reads the state of that step, and goes on.
TEST(NvmeStateStore, AKillMidPassLeavesTheLastCommitToResumeFrom) {
#if defined(__SANITIZE_THREAD__)
  // The forked child starts the store's I/O thread, which ThreadSanitizer
  // does not allow after a fork of a threaded process (the child dies).
  GTEST_SKIP() << "ThreadSanitizer cannot start threads in a forked child";
#endif
  const std::string dir = TempDir("kill");
  NvmeStoreOptions options;
  options.path = dir + "/s.swap";
  options.piece_elements = 3000;
  options.buffer_count = 3;
  options.pipeline_read = options.pipeline_write = true;
  const std::vector<std::string> names = {"master", "exp_avg", "exp_avg_sq"};
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the run that dies: steps 1 and 2 commit, step 3 is cut off
    MemoryTracker tracker;
    NvmeStateStore store(names, 10000, &tracker, options);
    auto pass = [&](float delta, int64_t step, int64_t pieces) {
      if (!store.BeginPass(step).ok()) ::_exit(2);
      for (int64_t p = 0; p < pieces; ++p) {
        StatePiece piece;
        const int64_t c = p * 3000;
        if (!store.Acquire(c, std::min<int64_t>(3000, 10000 - c), &piece).ok()) ::_exit(3);
        for (int k = 0; k < 3; ++k)
          for (int64_t i = 0; i < piece.count; ++i) piece.tensors[k][i] += delta;
        if (!store.Release(piece, true).ok()) ::_exit(4);
      }
    };
    if (!store.Open().ok()) ::_exit(1);
    store.SetCommitNote("after step 1");
    pass(1.0f, 1, 4);
    if (!store.EndPass().ok()) ::_exit(5);
    store.SetCommitNote("after step 2");
    pass(1.0f, 2, 4);
    if (!store.EndPass().ok()) ::_exit(5);
    pass(50.0f, 3, 3);  // three of four pieces written to their other slots
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  ASSERT_TRUE(std::filesystem::exists(options.path));  // a crash leaves the file
  options.resume = true;
  MemoryTracker tracker;
  NvmeStateStore store(names, 10000, &tracker, options);
  Status st = store.Open();
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(store.committed_step(), 2);
  std::vector<float> out(10000);
  for (size_t k = 0; k < 3; ++k) {
    ASSERT_TRUE(store.Read(k, 0, 10000, out.data()).ok());
    EXPECT_EQ(out, std::vector<float>(10000, 2.0f)) << "tensor " << k;
  }
  // Both records are whole, each with the engine's note. Step 1's slots
  // were overwritten by the cut-off step 3 (three of its four pieces):
  // taking it back shows on read; step 2 is whole.
  EXPECT_EQ(store.ResumableSteps(), (std::vector<int64_t>{2, 1}));
  Result<std::string> note = store.ResumeAt(1);
  ASSERT_TRUE(note.ok()) << note.status().message();
  EXPECT_EQ(note.value(), "after step 1");
  EXPECT_NE(store.Read(0, 0, 10000, out.data()).message().find("is corrupt"), std::string::npos);
  note = store.ResumeAt(2);
  ASSERT_TRUE(note.ok()) << note.status().message();
  EXPECT_EQ(note.value(), "after step 2");
  ASSERT_TRUE(store.Read(2, 0, 10000, out.data()).ok());
  EXPECT_EQ(out, std::vector<float>(10000, 2.0f));
  EXPECT_NE(store.ResumeAt(5).status().message().find("holds the commits of steps 2, 1"),
            std::string::npos);
  // A second run on the same file is refused while this one holds it.
  NvmeStoreOptions other = options;
  other.piece_elements = 2000;
  {
    NvmeStateStore wrong(names, 10000, &tracker, other);
    EXPECT_NE(wrong.Open().message().find("in use by another process"), std::string::npos);
  }
  store.RemoveOnClose();
}

TEST(NvmeStateStore, ASwapFileOfAnotherLayoutIsRefusedByName) {
  const std::string dir = TempDir("layout");
  {
    Result<std::unique_ptr<SwapFile>> made =
        SwapFile::Create(dir + "/s.swap", 10000, 3000, 3, AioConfig{}, "auto");
    ASSERT_TRUE(made.ok());
  }
  Result<std::unique_ptr<SwapFile>> reopened =
      SwapFile::Open(dir + "/s.swap", 10000, 2000, 3, AioConfig{}, "auto");
  ASSERT_FALSE(reopened.ok());
  EXPECT_NE(reopened.status().message().find("was written for another layout (10000 elements in "
                                             "pieces of 3000, 3 tensors); this run has 10000 in "
                                             "pieces of 2000"),
            std::string::npos)
      << reopened.status().message();
  reopened = SwapFile::Open(dir + "/s.swap", 10000, 3000, 3, AioConfig{}, "auto");
  ASSERT_TRUE(reopened.ok()) << reopened.status().message();
  EXPECT_EQ(reopened.value()->committed().step, 0);
  std::filesystem::remove_all(dir);
}

TEST(NvmeStateStore, ASwapFileWithARandomHeaderIsNamedCorruptNotAnotherLayout) {
  const std::string dir = TempDir("randomheader");
  {
    Result<std::unique_ptr<SwapFile>> made =
        SwapFile::Create(dir + "/s.swap", 10000, 3000, 3, AioConfig{}, "auto");
    ASSERT_TRUE(made.ok());
  }
  {  // the first 4 KiB overwritten with random bytes
    std::mt19937_64 rng(7);
    std::vector<uint64_t> noise(512);
    for (uint64_t &v : noise) v = rng();
    std::FILE *f = std::fopen((dir + "/s.swap").c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(noise.data(), 8, noise.size(), f), noise.size());
    std::fclose(f);
  }
  Result<std::unique_ptr<SwapFile>> reopened =
      SwapFile::Open(dir + "/s.swap", 10000, 3000, 3, AioConfig{}, "auto");
  ASSERT_FALSE(reopened.ok());
  const std::string message = reopened.status().message();
  EXPECT_NE(message.find("has a corrupt header or is not a dstrain swap file"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("another layout"), std::string::npos) << message;
  std::filesystem::remove_all(dir);
}

TEST(NvmeStateStore, ACleanShutdownRemovesTheSwapFile) {
  std::string path;
  {
    StoreFixture f("remove");
    path = f.dir + "/s.swap";
    EXPECT_TRUE(std::filesystem::exists(path));
    f.store.reset();
    EXPECT_FALSE(std::filesystem::exists(path));
  }
}

TEST(NvmeStateStore, FaultInjectionParses) {
#if !DSTRAIN_TEST_HOOKS
  ::setenv("DSTRAIN_INJECT_IO_FAULT", "0:3:2:write-short", 1);  // not read in such a build
  EXPECT_TRUE(ParseIoFaultInjection(0).value().empty());
  ::unsetenv("DSTRAIN_INJECT_IO_FAULT");
  GTEST_SKIP() << "a build without DSTRAIN_TEST_HOOKS reads no injection";
#endif
  ::setenv("DSTRAIN_INJECT_IO_FAULT", "0:3:2:write-short,1:4:0:read-error", 1);
  Result<std::vector<InjectedIoFault>> faults = ParseIoFaultInjection(1);
  ASSERT_TRUE(faults.ok());
  ASSERT_EQ(faults.value().size(), 1u);
  EXPECT_EQ(faults.value()[0].step, 4);
  EXPECT_EQ(faults.value()[0].op, IoOp::kRead);
  ::setenv("DSTRAIN_INJECT_IO_FAULT", "0:3:write", 1);
  EXPECT_FALSE(ParseIoFaultInjection(0).ok());
  ::unsetenv("DSTRAIN_INJECT_IO_FAULT");
}

}  // namespace
}  // namespace dst
