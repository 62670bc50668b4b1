#include "core/device/guarded_device.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dst::guarded {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kDefaultReserve = size_t(2) << 30;

size_t ReserveBytes() {
  const char *env = std::getenv("DSTRAIN_TEST_DEVICE_BYTES");
  if (env == nullptr || *env == '\0') return kDefaultReserve;
  const unsigned long long v = std::strtoull(env, nullptr, 10);
  return v >= kPage ? size_t(v) : kDefaultReserve;
}

Region *g_region = nullptr;

void Say(const char *text) {
  (void)!write(2, text, std::strlen(text));
}

// "0x..." of an address, without the formatting functions a signal handler
// may not call.
void SayAddress(const void *address) {
  char text[2 + 2 * sizeof(uintptr_t) + 1];
  const uintptr_t value = reinterpret_cast<uintptr_t>(address);
  size_t at = 0;
  text[at++] = '0';
  text[at++] = 'x';
  for (int shift = int(8 * sizeof(uintptr_t)) - 4; shift >= 0; shift -= 4)
    text[at++] = "0123456789abcdef"[(value >> shift) & 0xf];
  text[at] = '\0';
  Say(text);
}

// A touch of the region outside a kernel: named (address, last kernel, the
// stack), then the default action (the process dies of the SIGSEGV). Only
// async-signal-safe calls (backtrace's unwinder is loaded beforehand).
void OnFault(int signal, siginfo_t *info, void *) {
  if (g_region != nullptr && g_region->Holds(info->si_addr)) {
    Say("dstrain: DSTRAIN_TEST_DEVICE=guarded: host code touched device memory at ");
    SayAddress(info->si_addr);
    Say(" outside a kernel (the last kernel or copy: ");
    Say(g_region->last());
    Say(")\n");
    void *frames[32];
    backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
  }
  ::signal(signal, SIG_DFL);  // the faulting access repeats and ends the process
}

}  // namespace

Region &Region::Get() {
  static Region region;
  return region;
}

Region::Region() : reserved_(ReserveBytes()) {
  void *p = mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  base_ = p == MAP_FAILED ? nullptr : static_cast<char *>(p);
  g_region = this;
  if (const char *trace = std::getenv("DSTRAIN_TEST_DEVICE_TRACE"); trace && *trace) {
    const char *rank = std::getenv("RANK");
    trace_ = std::fopen((std::string(trace) + "." + (rank ? rank : "0")).c_str(), "w");
  }
  // backtrace() loads libgcc's unwinder on first use (dlopen, malloc): not
  // in the signal handler.
  void *warm[1];
  (void)backtrace(warm, 1);
  struct sigaction action {};
  action.sa_sigaction = OnFault;
  action.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &action, nullptr);
}

void Region::Protect(int prot) {
  if (protected_ > 0) mprotect(base_, protected_, prot);
}

void *Region::Allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t size = (bytes + 63) / 64 * 64;
  if (base_ == nullptr || used_ + size > reserved_) return nullptr;
  void *p = base_ + used_;
  used_ += size;
  const size_t pages = (used_ + kPage - 1) / kPage * kPage;
  if (pages > protected_) {  // the new pages: readable while open, and zeroed
    mprotect(base_ + protected_, pages - protected_, PROT_READ | PROT_WRITE);
    std::memset(base_ + protected_, 0, pages - protected_);
    if (open_ == 0) mprotect(base_ + protected_, pages - protected_, PROT_NONE);
    protected_ = pages;
  }
  return p;
}

void Region::Enter(const char *what) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_ = what;
  if (open_++ == 0) Protect(PROT_READ | PROT_WRITE);
}

void Region::Leave() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--open_ == 0) Protect(PROT_NONE);
}

void Region::Trace(const char *kind, const char *what, uint64_t id) {
  if (trace_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (id > 0)
    std::fprintf(trace_, "%s %s%llu\n", kind, what, static_cast<unsigned long long>(id));
  else
    std::fprintf(trace_, "%s %s\n", kind, what);
  std::fflush(trace_);
}

void Region::WaitBeforeNextKernel(Work *work) {
  Trace("stream-wait");
  std::lock_guard<std::mutex> lock(mutex_);
  stream_.push_back({.wait = work, .seq = ++ops_queued_});
  any_stream_op_ = true;
}

void Region::WaitForCopies() {
  uint64_t mark = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (copies_queued_ <= std::max(copies_done_, copies_ordered_)) return;  // none left to order
    mark = copies_ordered_ = copies_queued_;
    stream_.push_back({.copies = mark, .seq = ++ops_queued_});
    any_stream_op_ = true;
  }
  Trace("stream-copy-wait", "", mark);
}

void Region::SetBeforeHostWait(std::function<Status()> hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  before_host_wait_ = std::move(hook);
}

bool Region::BeforeHostWait() {
  Trace("host-drain");
  std::function<Status()> hook;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    hook = before_host_wait_;
  }
  Status st = hook ? hook() : Status::Ok();
  if (st.ok()) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_.ok()) error_ = std::move(st);
  return false;
}

Status Region::TakeError() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(error_, Status::Ok());
}

void Region::Forget(Work *work) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (StreamOp &op : stream_)
    if (op.wait == work) op.wait = nullptr;  // ended first: nothing to wait for
}

uint64_t Region::QueueCopy(void *dst, const void *src, size_t bytes) {
  uint64_t mark = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mark = ++copies_queued_;
    copies_.push_back({.dst = dst, .src = src, .bytes = bytes, .mark = mark, .after = ops_queued_});
  }
  Trace("copy-queued", "", mark);
  return mark;
}

void Region::RunStream(uint64_t upto) {
  if (!any_stream_op_) return;
  for (;;) {
    StreamOp op;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stream_.empty() || stream_.front().seq > upto) {
        any_stream_op_ = !stream_.empty();
        return;
      }
      op = stream_.front();
      stream_.pop_front();
    }
    if (op.copies > 0) {
      RunCopies(op.copies);
      continue;
    }
    in_stream_ = true;
    if (op.wait != nullptr) (void)op.wait->Wait();  // it keeps its status for the Drain
    in_stream_ = false;
  }
}

void Region::RunCopies(uint64_t mark) {
  for (;;) {
    CopyOp op;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (copies_.empty() || copies_done_ >= mark) return;
      op = copies_.front();
      copies_.pop_front();
    }
    RunStream(op.after);  // the compute stream's work it was queued behind
    Enter("an asynchronous copy");
    std::memcpy(op.dst, op.src, op.bytes);
    Leave();
    Trace("copy-run", "", op.mark);
    std::lock_guard<std::mutex> lock(mutex_);
    copies_done_ = op.mark;
  }
}

bool Region::Holds(const void *p) const {
  const char *c = static_cast<const char *>(p);
  return base_ != nullptr && c >= base_ && c < base_ + reserved_;
}

Result<void *> Segments::Allocate(size_t bytes) {
  void *p = Region::Get().Allocate(bytes);
  if (p == nullptr)
    return Status(Code::kOutOfMemory, "the guarded stand-in's region is full (" +
                                          std::to_string(bytes) +
                                          " bytes asked); raise DSTRAIN_TEST_DEVICE_BYTES");
  return p;
}

void *Memory::Allocate(size_t bytes) {
  Result<void *> p = cache_.Allocate(bytes == 0 ? 1 : bytes, 0, MemoryCategory::kParameters);
  if (!p.ok()) return nullptr;
  Zero(p.value(), bytes);
  return p.value();
}

void Memory::Free(void *p) {
  if (p != nullptr) (void)cache_.Free(p);
}

namespace {
// A copy between the host and the device must have its device side in the
// region and its host side outside it (a GPU's copy of the wrong kind fails
// or reads garbage): named, then the process ends like a fault.
void CheckCopy(const char *copy, const void *device_side, const void *host_side, size_t bytes) {
  const bool device_ok = bytes == 0 || Region::Get().Holds(device_side);
  const bool host_ok = bytes == 0 || !Region::Get().Holds(host_side);
  if (device_ok && host_ok) return;
  char line[200];
  std::snprintf(line, sizeof line,
                "dstrain: DSTRAIN_TEST_DEVICE=guarded: %s of %zu bytes was handed %s memory at "
                "%p for its %s side\n",
                copy, bytes, device_ok ? "device" : "host", device_ok ? host_side : device_side,
                device_ok ? "host" : "device");
  Say(line);
  void *frames[32];
  backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
  std::abort();
}
}  // namespace

void Memory::Upload(void *dst, const void *src, size_t bytes) {
  CheckCopy("Upload", dst, src, bytes);
  const Scope open("Upload");
  std::memcpy(dst, src, bytes);
}

void Memory::Download(void *dst, const void *src, size_t bytes) {
  CheckCopy("Download", src, dst, bytes);
  const Scope open("Download");
  std::memcpy(dst, src, bytes);
}

size_t Memory::chunk_bytes() const {
  const char *env = std::getenv("DSTRAIN_TEST_DEVICE_CHUNK_BYTES");
  const unsigned long long v = env ? std::strtoull(env, nullptr, 10) : 0;
  return v >= sizeof(float) ? size_t(v) : MemoryResource::chunk_bytes();
}

uint64_t Memory::DownloadAsync(void *host, const void *src, size_t bytes) {
  CheckCopy("DownloadAsync", src, host, bytes);
  return Region::Get().QueueCopy(host, src, bytes);
}

uint64_t Memory::UploadAsync(void *dst, const void *host, size_t bytes) {
  CheckCopy("UploadAsync", dst, host, bytes);
  return Region::Get().QueueCopy(dst, host, bytes);
}

void Memory::Zero(void *dst, size_t bytes) {
  const Scope open("Zero");
  std::memset(dst, 0, bytes);
}

namespace {

// The region stays open until the operation completes (Wait, a true Test,
// or the Work's end). Its completion "event" is itself.
class OpenWork final : public Work {
 public:
  OpenWork(std::unique_ptr<Work> inner, const char *what) : inner_(std::move(inner)), what_(what) {}
  ~OpenWork() override {
    Region::Get().Forget(this);
    inner_.reset();
    Close();
  }
  Status Wait() override {
    if (!waited_) {
      if (!Region::Get().in_stream()) Region::Get().Trace("host-wait", what_);
      status_ = inner_->Wait(), waited_ = true;
    }
    Close();
    return status_;
  }
  bool Test() override {
    if (waited_) return true;
    const bool done = inner_->Test();
    if (done) status_ = inner_->Wait(), waited_ = true, Close();  // finished: no host wait
    return done;
  }
  void *CompletionEvent() const override {
    return static_cast<Work *>(const_cast<OpenWork *>(this));
  }

 private:
  void Close() {
    if (open_) Region::Get().Leave();
    open_ = false;
  }
  std::unique_ptr<Work> inner_;
  const char *what_;
  bool open_ = true;
  bool waited_ = false;
  Status status_;
};

// The device group moves device memory only: a host buffer routed here (to
// NCCL on a GPU) is an error naming the operation and the address.
std::unique_ptr<Work> HandedHostMemory(const char *op, const void *data) {
  char where[32];
  std::snprintf(where, sizeof where, "%p", data);
  return std::make_unique<DoneWork>(InternalError(
      std::string("the device group's ") + op + " was handed host memory at " + where +
      " (a GPU's NCCL group would read garbage or crash): route host buffers to the host group"));
}

template <typename Launch>
std::unique_ptr<Work> Opened(const char *op, const void *data, Launch launch) {
  if (data != nullptr && !Region::Get().Holds(data)) return HandedHostMemory(op, data);
  Region::Get().RunStream();  // ordered after the compute stream's work, as NCCL's are
  Region::Get().Enter(op);
  Region::Get().Trace("collective", op);
  return std::make_unique<OpenWork>(launch(), op);
}

}  // namespace

std::unique_ptr<Work> Communicator::AllReduceSum(float *d, int64_t n) {
  return Opened("AllReduceSum", d, [&] { return inner().AllReduceSum(d, n); });
}
std::unique_ptr<Work> Communicator::ReduceSum(float *d, int64_t n, int64_t root) {
  return Opened("ReduceSum", d, [&] { return inner().ReduceSum(d, n, root); });
}
std::unique_ptr<Work> Communicator::ReduceScatterSum(float *d, int64_t shard) {
  return Opened("ReduceScatterSum", d, [&] { return inner().ReduceScatterSum(d, shard); });
}
std::unique_ptr<Work> Communicator::AllGather(float *d, int64_t shard) {
  return Opened("AllGather", d, [&] { return inner().AllGather(d, shard); });
}
std::unique_ptr<Work> Communicator::Broadcast(float *d, int64_t n, int64_t root) {
  return Opened("Broadcast", d, [&] { return inner().Broadcast(d, n, root); });
}
// NCCL's send and receive are stream-ordered (a receive posted ahead holds
// every later send of its stream): the engine's device traffic between
// ranks goes in exchanges whose order core/pipeline/exchange_order.h
// proved, and the stand-in holds it to that.
namespace {
std::unique_ptr<Work> NoPointToPoint(const char *op, int64_t peer, uint32_t tag) {
  return std::make_unique<DoneWork>(InternalError(
      std::string("the device group was handed a lone ") + op + " (peer " + std::to_string(peer) +
      ", tag " + std::to_string(tag) +
      "): a GPU's NCCL send/receive runs in stream order and matches by order, not tag; post "
      "it in an Exchange whose order the pipeline's exchange check proved"));
}
}  // namespace

// Matched by order per peer, as NCCL matches them: every operation travels
// under one tag, so a schedule whose sends and receives are not in the same
// order on both sides delivers the wrong message here too.
std::unique_ptr<Work> Communicator::Exchange(const std::vector<PeerOp> &ops) {
  std::vector<PeerOp> ordered = ops;
  for (PeerOp &op : ordered) {
    op.tag = 0;
    if (!Region::Get().Holds(op.data)) return HandedHostMemory("Exchange", op.data);
  }
  return Opened("Exchange", nullptr, [&] { return inner().Exchange(ordered); });
}

std::unique_ptr<Work> Communicator::Send(const void *, int64_t, int64_t peer, uint32_t tag) {
  return NoPointToPoint("send", peer, tag);
}
std::unique_ptr<Work> Communicator::Recv(void *, int64_t, int64_t peer, uint32_t tag) {
  return NoPointToPoint("receive", peer, tag);
}
std::unique_ptr<Work> Communicator::AllReduceSum16(uint16_t *d, int64_t n, Half type) {
  return Opened("AllReduceSum16", d, [&] { return inner().AllReduceSum16(d, n, type); });
}
std::unique_ptr<Work> Communicator::ReduceSum16(uint16_t *d, int64_t n, int64_t root, Half type) {
  return Opened("ReduceSum16", d, [&] { return inner().ReduceSum16(d, n, root, type); });
}
std::unique_ptr<Work> Communicator::AllGather16(uint16_t *d, int64_t shard) {
  return Opened("AllGather16", d, [&] { return inner().AllGather16(d, shard); });
}
std::unique_ptr<Work> Communicator::Broadcast16(uint16_t *d, int64_t n, int64_t root) {
  return Opened("Broadcast16", d, [&] { return inner().Broadcast16(d, n, root); });
}

}  // namespace dst::guarded
