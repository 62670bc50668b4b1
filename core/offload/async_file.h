// Asynchronous reads and writes of one file at explicit offsets, for the
// NVMe offload tier. Two engines behind one interface, chosen at run time:
// io_uring (Debian's liburing) where the kernel allows it, else a worker
// thread issuing pread/pwrite (e.g. under a seccomp profile that refuses
// io_uring_setup). A request is split into aio.block_size pieces with at
// most aio.queue_depth in flight. Every completion is checked: a short
// transfer continues where it stopped, an error names the file, the offset
// and errno. DeepSpeed's aio handle does neither (issues #5700, #7549).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/common/status.h"
#include "core/config/config.h"

namespace dst {

enum class IoOp { kRead, kWrite };

// Test hook: what a request suffers (the engines simulate it; the retry and
// error paths that follow are the real ones).
enum class IoFault {
  kNone,
  kError,             // the first transfer fails with EIO, nothing moved
  kShortThenRest,     // the first transfer moves half, the continuation the rest
  kShortThenNoSpace,  // the first transfer moves half, the continuation fails with ENOSPC
};

struct IoRequest {
  IoOp op = IoOp::kRead;
  void *buf = nullptr;  // aligned as the file needs (O_DIRECT)
  size_t bytes = 0;
  int64_t offset = 0;
  IoFault fault = IoFault::kNone;
};

// A snapshot of a file's I/O so far.
struct IoCounters {
  int64_t read_bytes = 0, write_bytes = 0;
  int64_t requests = 0;
  int64_t short_transfers = 0;  // continued after a short read or write
  double wait_seconds = 0;      // the caller blocked in Wait/WaitAll/Sync
};

class AsyncFile {
 public:
  virtual ~AsyncFile() = default;
  // "io_uring" or "pread/pwrite".
  virtual const char *engine() const = 0;
  const std::string &path() const { return path_; }
  int fd() const { return fd_; }

  // Starts a request; its buffer stays untouched by the caller until the
  // ticket is waited for.
  virtual Result<uint64_t> Submit(const IoRequest &request) = 0;
  // The request finished: every byte moved, or its error.
  virtual Status Wait(uint64_t ticket) = 0;
  // Every request submitted so far; the first error.
  virtual Status WaitAll() = 0;
  // fdatasync: what was written is on the device.
  Status Sync();
  // Read while the completion thread (io_uring) adds to them: a snapshot.
  IoCounters counters() const;

 protected:
  AsyncFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
  // Updated by the completion thread and the caller, read by the metrics.
  struct LiveCounters {
    std::atomic<int64_t> read_bytes{0}, write_bytes{0}, requests{0}, short_transfers{0};
    std::atomic<double> wait_seconds{0};
  };
  LiveCounters counters_;
};

// "auto" (io_uring, else pread/pwrite), "io_uring" or "pread". `fd` stays
// owned by the caller and must outlive the AsyncFile.
Result<std::unique_ptr<AsyncFile>> OpenAsyncFile(const std::string &path, int fd,
                                                 const AioConfig &aio,
                                                 std::string_view engine = "auto");

// Why io_uring is not used here ("" when it is available): the kernel's
// answer to io_uring_queue_init (dstrain report).
std::string IoUringUnavailableReason();

// "read of 4096 bytes at offset 8192 of /p/f failed: Input/output error (errno 5)".
std::string IoFailure(IoOp op, size_t bytes, int64_t offset, const std::string &path, int err);

}  // namespace dst
