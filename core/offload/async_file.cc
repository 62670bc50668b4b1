#include "core/offload/async_file.h"

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace dst {

IoCounters AsyncFile::counters() const {
  IoCounters c;
  c.read_bytes = counters_.read_bytes.load(std::memory_order_relaxed);
  c.write_bytes = counters_.write_bytes.load(std::memory_order_relaxed);
  c.requests = counters_.requests.load(std::memory_order_relaxed);
  c.short_transfers = counters_.short_transfers.load(std::memory_order_relaxed);
  c.wait_seconds = counters_.wait_seconds.load(std::memory_order_relaxed);
  return c;
}

std::string IoFailure(IoOp op, size_t bytes, int64_t offset, const std::string &path, int err) {
  std::string what = std::string(op == IoOp::kRead ? "read" : "write") + " of " +
                     std::to_string(bytes) + " bytes at offset " + std::to_string(offset) + " of " +
                     path + " failed: ";
  if (err == 0) return what + (op == IoOp::kRead ? "the file ends there" : "0 bytes written");
  return what + std::strerror(err) + " (errno " + std::to_string(err) + ")";
}

Status AsyncFile::Sync() {
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = ::fdatasync(fd_);
  counters_.wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rc != 0) {
    const int err = errno;
    return IoError("fdatasync of " + path_ + " failed: " + std::strerror(err) + " (errno " +
                   std::to_string(err) + ")");
  }
  return Status::Ok();
}

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One block of a request, moved by one or more transfers (a short one is
// continued where it stopped).
struct Chunk {
  uint64_t ticket = 0;
  size_t at = 0;     // byte offset inside the request
  size_t bytes = 0;  // this chunk's size
  size_t moved = 0;  // bytes moved so far
};

// A request in flight: its chunks left and its first error.
struct Transfer {
  IoRequest request;
  size_t chunks_left = 0;
  Status error = Status::Ok();
  bool fault_pending = false;  // the injected fault has not struck yet
  size_t fault_at = SIZE_MAX;  // the chunk it struck (its continuation may fail too)
};

// What the injected fault does to the next transfer of `chunk`: how many
// bytes to ask for, or an errno to fail with (the continuation of a short one).
struct Attempt {
  size_t bytes = 0;
  int fail_errno = 0;
};

Attempt NextAttempt(Transfer &t, const Chunk &c) {
  const size_t left = c.bytes - c.moved;
  if (c.at == t.fault_at) {
    t.fault_at = SIZE_MAX;
    if (t.request.fault == IoFault::kShortThenNoSpace) return {0, ENOSPC};
  }
  if (!t.fault_pending) return {left, 0};
  t.fault_pending = false;
  switch (t.request.fault) {
    case IoFault::kError:
      return {0, EIO};
    case IoFault::kShortThenRest:
    case IoFault::kShortThenNoSpace:
      t.fault_at = c.at;
      return {std::max<size_t>(1, left / 2), 0};
    case IoFault::kNone:
      break;
  }
  return {left, 0};
}

std::vector<Chunk> SplitIntoChunks(uint64_t ticket, size_t bytes, size_t block) {
  std::vector<Chunk> chunks;
  for (size_t at = 0; at < bytes; at += block)
    chunks.push_back(Chunk{ticket, at, std::min(block, bytes - at), 0});
  if (chunks.empty()) chunks.push_back(Chunk{ticket, 0, 0, 0});
  return chunks;
}

// What both engines share: the requests in flight by ticket, under one
// lock; the engine's thread finishes them and wakes the waiters.
class TrackedFile : public AsyncFile {
 public:
  Status Wait(uint64_t ticket) override {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return live_.at(ticket).chunks_left == 0; });
    counters_.wait_seconds += SecondsSince(t0);
    Status st = std::move(live_.at(ticket).error);
    live_.erase(ticket);
    Forget(ticket);
    return st;
  }

  Status WaitAll() override {
    Status first = Status::Ok();
    for (;;) {
      uint64_t ticket = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (live_.empty()) return first;
        ticket = live_.begin()->first;
      }
      Status st = Wait(ticket);
      if (first.ok() && !st.ok()) first = std::move(st);
    }
  }

 protected:
  TrackedFile(std::string path, int fd) : AsyncFile(std::move(path), fd) {}
  // A finished request was collected (mu_ held): drop what the engine kept for it.
  virtual void Forget(uint64_t ticket) { (void)ticket; }
  // A new request, `chunks` parts to finish (mu_ held).
  uint64_t Track(const IoRequest &request, size_t chunks) {
    const uint64_t ticket = ++last_ticket_;
    Transfer &t = live_[ticket];
    t.request = request;
    t.fault_pending = request.fault != IoFault::kNone;
    t.chunks_left = chunks;
    ++counters_.requests;
    return ticket;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint64_t, Transfer> live_;

 private:
  uint64_t last_ticket_ = 0;
};

// ----------------------------------------------------------------- io_uring

// The kernel moves the data; a reaper thread takes each completion as it
// arrives and hands the next chunks to the kernel, so the queue stays full
// while the caller computes (chunks are only submitted up to queue_depth).
class UringFile final : public TrackedFile {
 public:
  UringFile(std::string path, int fd, const AioConfig &aio, io_uring ring)
      : TrackedFile(std::move(path), fd),
        ring_(ring),
        block_(size_t(aio.block_size)),
        depth_(size_t(aio.queue_depth)) {
    reaper_ = std::thread([this] { Reap(); });
  }
  ~UringFile() override {
    (void)WaitAll();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
      if (sqe != nullptr) {  // wakes the reaper (null data: not a chunk)
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, nullptr);
      }
      io_uring_submit(&ring_);
    }
    reaper_.join();
    io_uring_queue_exit(&ring_);
  }
  const char *engine() const override { return "io_uring"; }

  Result<uint64_t> Submit(const IoRequest &request) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_)
      return IoError("the io_uring of " + path_ + " failed earlier; no request can be made");
    const std::vector<Chunk> parts = SplitIntoChunks(0, request.bytes, block_);
    const uint64_t ticket = Track(request, parts.size());
    for (Chunk c : parts) {
      c.ticket = ticket;
      chunks_.push_back(std::make_unique<Chunk>(c));
      pending_.push_back(chunks_.back().get());
    }
    Pump();
    cv_.notify_all();  // a chunk finished at submission (an injected error)
    return ticket;
  }

 private:
  // Hands pending chunks to the kernel while the queue has room (mu_ held).
  void Pump() {
    bool queued = false;
    while (!pending_.empty() && in_flight_ < depth_) {
      Chunk *c = pending_.front();
      Transfer &t = live_.at(c->ticket);
      io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) break;  // the ring is full: the next completion pumps again
      pending_.pop_front();
      const Attempt a = NextAttempt(t, *c);
      if (a.fail_errno != 0 || c->bytes == 0) {
        io_uring_prep_nop(sqe);  // the slot is taken: a no-op that completes this chunk
        io_uring_sqe_set_data(sqe, c);
        failed_.push_back({c, a.fail_errno});
        ++in_flight_;
        queued = true;
        continue;
      }
      char *buf = static_cast<char *>(t.request.buf) + c->at + c->moved;
      const uint64_t off = uint64_t(t.request.offset) + c->at + c->moved;
      if (t.request.op == IoOp::kRead)
        io_uring_prep_read(sqe, fd_, buf, unsigned(a.bytes), off);
      else
        io_uring_prep_write(sqe, fd_, buf, unsigned(a.bytes), off);
      io_uring_sqe_set_data(sqe, c);
      ++in_flight_;
      queued = true;
    }
    if (queued) io_uring_submit(&ring_);
  }

  void Reap() {
    for (;;) {
      io_uring_cqe *cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (rc < 0) {  // the ring itself failed: fail everything, stop reaping
        for (auto &[ticket, t] : live_) {
          if (t.error.ok())
            t.error = IoError("io_uring wait on " + path_ + " failed: " + std::strerror(-rc));
          t.chunks_left = 0;
        }
        pending_.clear();
        broken_ = true;
        cv_.notify_all();
        return;
      }
      Chunk *c = static_cast<Chunk *>(io_uring_cqe_get_data(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (c == nullptr) {  // the destructor's wake-up
        if (stopping_) return;
        continue;
      }
      --in_flight_;
      Complete(c, res);
      Pump();
      cv_.notify_all();
    }
  }

  // A completion of chunk `c` with result `res` (mu_ held).
  void Complete(Chunk *c, int res) {
    Transfer &t = live_.at(c->ticket);
    for (auto f = failed_.begin(); f != failed_.end(); ++f)
      if (f->first == c) {  // an injected failure's no-op
        const int err = f->second;
        failed_.erase(f);
        Finish(t, *c, c->bytes == 0 && err == 0 ? -1 : err);
        return;
      }
    if (res == -EINTR || res == -EAGAIN) {
      pending_.push_front(c);
    } else if (res < 0) {
      Finish(t, *c, -res);
    } else if (res == 0) {
      Finish(t, *c, t.request.op == IoOp::kRead ? 0 : ENOSPC);
    } else {
      c->moved += size_t(res);
      (t.request.op == IoOp::kRead ? counters_.read_bytes : counters_.write_bytes) += res;
      if (c->moved < c->bytes) {
        ++counters_.short_transfers;
        pending_.push_front(c);
      } else {
        Finish(t, *c, -1);
      }
    }
  }

  // The chunk is done: `err` -1 success, else its errno (0: end of file).
  void Finish(Transfer &t, const Chunk &c, int err) {
    if (err >= 0 && t.error.ok())
      t.error = IoError(IoFailure(t.request.op, c.bytes - c.moved,
                                  t.request.offset + int64_t(c.at + c.moved), path_, err));
    --t.chunks_left;
  }

  void Forget(uint64_t ticket) override {
    std::erase_if(chunks_, [&](const std::unique_ptr<Chunk> &c) { return c->ticket == ticket; });
  }

  io_uring ring_;
  size_t block_, depth_, in_flight_ = 0;
  bool stopping_ = false, broken_ = false;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::deque<Chunk *> pending_;
  std::vector<std::pair<Chunk *, int>> failed_;  // chunks failed at submission: their errno
  std::thread reaper_;
};

// ----------------------------------------------------------- pread/pwrite

class ThreadFile final : public TrackedFile {
 public:
  ThreadFile(std::string path, int fd, const AioConfig &aio)
      : TrackedFile(std::move(path), fd), block_(size_t(aio.block_size)) {
    worker_ = std::thread([this] { Run(); });
  }
  ~ThreadFile() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  const char *engine() const override { return "pread/pwrite"; }

  Result<uint64_t> Submit(const IoRequest &request) override {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t ticket = Track(request, 1);
    queue_.push_back(ticket);
    cv_.notify_all();
    return ticket;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      const uint64_t ticket = queue_.front();
      queue_.pop_front();
      Transfer t = live_.at(ticket);  // a copy: the request is read without the lock
      lock.unlock();
      Status st = Move(t);
      lock.lock();
      Transfer &live = live_.at(ticket);
      live.error = std::move(st);
      live.chunks_left = 0;
      cv_.notify_all();
    }
  }

  // The whole request, block by block, each block continued after a short
  // transfer. Counters are updated under the lock by the caller's view.
  Status Move(Transfer &t) {
    for (Chunk c : SplitIntoChunks(0, t.request.bytes, block_)) {
      while (c.moved < c.bytes) {
        const Attempt a = NextAttempt(t, c);
        const int64_t off = t.request.offset + int64_t(c.at + c.moved);
        if (a.fail_errno != 0)
          return IoError(IoFailure(t.request.op, c.bytes - c.moved, off, path_, a.fail_errno));
        char *buf = static_cast<char *>(t.request.buf) + c.at + c.moved;
        const ssize_t n = t.request.op == IoOp::kRead ? ::pread(fd_, buf, a.bytes, off)
                                                      : ::pwrite(fd_, buf, a.bytes, off);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {
          const int err = n < 0 ? errno : (t.request.op == IoOp::kRead ? 0 : ENOSPC);
          return IoError(IoFailure(t.request.op, c.bytes - c.moved, off, path_, err));
        }
        c.moved += size_t(n);
        std::lock_guard<std::mutex> lock(mu_);
        (t.request.op == IoOp::kRead ? counters_.read_bytes : counters_.write_bytes) += n;
        if (c.moved < c.bytes) ++counters_.short_transfers;
      }
    }
    return Status::Ok();
  }

  size_t block_;
  bool stop_ = false;
  std::deque<uint64_t> queue_;
  std::thread worker_;
};

Result<io_uring> NewRing(unsigned depth) {
  io_uring ring;
  const int rc = io_uring_queue_init(std::max(2u, depth), &ring, 0);
  if (rc < 0)
    return IoError(std::string("io_uring_queue_init: ") + std::strerror(-rc) + " (errno " +
                   std::to_string(-rc) + ")");
  return ring;
}

}  // namespace

std::string IoUringUnavailableReason() {
  Result<io_uring> ring = NewRing(2);
  if (!ring.ok()) return ring.status().message();
  io_uring_queue_exit(&ring.value());
  return "";
}

Result<std::unique_ptr<AsyncFile>> OpenAsyncFile(const std::string &path, int fd,
                                                 const AioConfig &aio, std::string_view engine) {
  if (engine != "auto" && engine != "io_uring" && engine != "pread")
    return InvalidArgument("I/O engine \"" + std::string(engine) +
                           "\": expected auto, io_uring or pread");
  if (engine != "pread") {
    Result<io_uring> ring = NewRing(unsigned(std::min<int64_t>(aio.queue_depth, 4096)));
    if (ring.ok())
      return std::unique_ptr<AsyncFile>(std::make_unique<UringFile>(path, fd, aio, ring.value()));
    if (engine == "io_uring") {
      Status st = ring.status();
      return st.context("the io_uring I/O engine for " + path);
    }
  }
  return std::unique_ptr<AsyncFile>(std::make_unique<ThreadFile>(path, fd, aio));
}

}  // namespace dst
