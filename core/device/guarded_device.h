// A device stand-in that checks the device path's host code on any machine
// (DSTRAIN_TEST_DEVICE=guarded with dstrain.device "cuda"): the buffers a
// device would hold live in one reserved host region that is mapped without
// access except while a kernel of the stand-in's backends, one of its copies
// (upload, download, zero) or a collective over it runs. Any other read or
// write of device memory — what would crash or read garbage on a GPU —
// faults, and the fault handler names the address and the last kernel before
// the process dies. The kernels are the CPU's, so a run on the stand-in gives
// the CPU run's bits.
//
// What it cannot see: a device kernel handed host memory (both are host
// memory here), and host touches while a collective is in flight (the region
// stays open until its Work completes).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/comm/communicator.h"
#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/cpu_step_kernels.h"
#include "core/device/caching_allocator.h"
#include "core/runtime/memory.h"

namespace dst::guarded {

// The process's region (one per process: the fault handler and the kernels'
// scopes reach it globally). Opened while any Enter is not yet matched by
// its Leave.
class Region {
 public:
  // Reserves `bytes` of address space on first use (DSTRAIN_TEST_DEVICE_BYTES,
  // default 2 GiB) and installs the fault handler.
  static Region &Get();

  // `bytes` from the region (64-byte aligned, zeroed), or null when full.
  void *Allocate(size_t bytes);
  // Opens the region for `what` (a kernel, a copy, a collective).
  void Enter(const char *what);
  void Leave();
  bool Holds(const void *p) const;
  // The last thing that opened the region (the fault message names it).
  const char *last() const { return last_; }

  // The stand-in's two streams, as a GPU's compute and copy streams.
  // The compute stream: operations queued in order and run before the next
  // kernel, synchronous copy or collective (RunStream, from Scope):
  //  - a wait for a collective (a WorkOrder's stream wait, `work` its
  //    completion event); Forget drops a Work that ends before that;
  //  - a wait for the copies queued so far (WaitForCopies: the device
  //    memory's OrderAfterCopies).
  // The copy stream: asynchronous copies (Memory::DownloadAsync /
  // UploadAsync), each after the compute stream's work queued before it,
  // run as late as a GPU may run them: only when the host waits for one
  // (WaitCopy, RunCopies) or the compute stream does (WaitForCopies). So a
  // host read of a download's buffer before WaitCopy sees stale bytes, a
  // write into an upload's buffer is what gets uploaded, and a kernel that
  // writes a download's source before either wait changes what arrives —
  // wrong bits, as on a GPU whose copy engine ran late.
  void WaitBeforeNextKernel(Work *work);
  void WaitForCopies();
  // The stand-in's host waits (a kernel returning a value: a loss, a norm)
  // run `hook` first — the device's WorkOrder drain, as CUDA's backend does —
  // and keep its first failure for TakeError (null: none).
  void SetBeforeHostWait(std::function<Status()> hook);
  bool BeforeHostWait();
  Status TakeError();
  void Forget(Work *work);
  uint64_t QueueCopy(void *dst, const void *src, size_t bytes);
  // Runs the compute stream's queued operations in order: all of them, or
  // those numbered up to `upto`.
  void RunStream(uint64_t upto = UINT64_MAX);
  // Runs the copy stream up to the copy `mark` names (each copy first runs
  // the compute stream's work queued before it).
  void RunCopies(uint64_t mark);

  // The step's streams as a recorded program: with DSTRAIN_TEST_DEVICE_TRACE
  // set, each kernel or copy ("kernel NAME"), collective ("collective OP"),
  // compute-stream wait for one ("stream-wait") or for the copies
  // ("stream-copy-wait MARK"), queued asynchronous copy ("copy-queued
  // MARK"), that copy running ("copy-run MARK"), host wait for it
  // ("copy-wait MARK"), host wait for the compute stream ("host-drain") and
  // host wait for a collective ("host-wait OP") is a line of
  // $DSTRAIN_TEST_DEVICE_TRACE.<RANK>, in order; tests read what blocked the
  // host and what overlapped.
  void Trace(const char *kind, const char *what = "", uint64_t id = 0);
  // True while the stream runs its queued operations (a wait there is the
  // stream's, not the host's).
  bool in_stream() const { return in_stream_; }

 private:
  Region();
  void Protect(int prot);  // over the pages handed out so far

  std::mutex mutex_;
  char *base_ = nullptr;
  size_t reserved_ = 0, used_ = 0, protected_ = 0;
  int open_ = 0;
  const char *last_ = "(none)";
  struct StreamOp {        // on the compute stream:
    Work *wait = nullptr;  // a collective to wait for, or
    uint64_t copies = 0;   // the copies up to this mark (> 0)
    uint64_t seq = 0;      // its number on the stream
  };
  struct CopyOp {  // on the copy stream
    void *dst = nullptr;
    const void *src = nullptr;
    size_t bytes = 0;
    uint64_t mark = 0;
    uint64_t after = 0;  // the compute stream's operations up to this number first
  };
  std::deque<StreamOp> stream_;
  std::deque<CopyOp> copies_;
  uint64_t ops_queued_ = 0;
  std::function<Status()> before_host_wait_;
  Status error_;
  std::atomic<bool> any_stream_op_{false};
  std::atomic<bool> in_stream_{false};
  std::FILE *trace_ = nullptr;
  uint64_t copies_queued_ = 0, copies_done_ = 0, copies_ordered_ = 0;
};

// The region open for a scope: the backends' per-kernel Scope.
struct Scope {
  explicit Scope(const char *kernel) {
    Region::Get().RunStream();
    Region::Get().Enter(kernel);
    Region::Get().Trace("kernel", kernel);
  }
  static bool HostWaitReady() { return Region::Get().BeforeHostWait(); }
  static Status TakeError() { return Region::Get().TakeError(); }
  ~Scope() { Region::Get().Leave(); }
  Scope(const Scope &) = delete;
  Scope &operator=(const Scope &) = delete;
};

using Kernels = cpu::CpuKernels<float, Scope>;
using StepKernels = cpu::CpuStepKernels<Scope>;

// The region's pages as a device's raw allocator (segments are never given
// back: the region only grows).
class Segments final : public DeviceMemoryResource {
 public:
  Result<void *> Allocate(size_t bytes) override;
  void Free(void *) override {}
  std::string name() const override { return "guarded"; }
};

// The region as a MemoryResource ("guarded"), through the same caching
// allocator as a GPU's memory: freed blocks are reused.
class Memory final : public MemoryResource {
 public:
  Memory() : cache_(&segments_, nullptr) {}
  std::string_view name() const override { return "guarded"; }
  void *Allocate(size_t bytes) override;
  void Free(void *p) override;
  void Upload(void *dst, const void *src, size_t bytes) override;
  void Download(void *dst, const void *src, size_t bytes) override;
  void Zero(void *dst, size_t bytes) override;
  // Queued on the stand-in's copy stream (Region::QueueCopy).
  uint64_t DownloadAsync(void *host, const void *src, size_t bytes) override;
  uint64_t UploadAsync(void *dst, const void *host, size_t bytes) override;
  void WaitCopy(uint64_t mark) override {
    Region::Get().Trace("copy-wait", "", mark);
    Region::Get().RunCopies(mark);
  }
  void OrderAfterCopies() override { Region::Get().WaitForCopies(); }
  // DSTRAIN_TEST_DEVICE_CHUNK_BYTES when set (tests that need many chunks
  // from a tiny model), else the default.
  size_t chunk_bytes() const override;
  CachingAllocatorStats stats() const { return cache_.stats(); }

 private:
  Segments segments_;
  CachingAllocator cache_;
};

// The device twin of a group (its collectives over device memory): each
// operation must be over the region — a host buffer here is an error, as it
// would be for NCCL — and opens it from its start until its Work completes.
// Its Works have a completion "event" (the Work itself) a WorkOrder's stream
// wait can name (Region::WaitBeforeNextKernel).
class Communicator final : public ForwardingCommunicator {
 public:
  explicit Communicator(std::unique_ptr<dst::Communicator> inner)
      : ForwardingCommunicator(std::move(inner)) {}
  std::unique_ptr<Work> AllReduceSum(float *d, int64_t n) override;
  std::unique_ptr<Work> ReduceSum(float *d, int64_t n, int64_t root) override;
  std::unique_ptr<Work> ReduceScatterSum(float *d, int64_t shard) override;
  std::unique_ptr<Work> AllGather(float *d, int64_t shard) override;
  std::unique_ptr<Work> Broadcast(float *d, int64_t n, int64_t root) override;
  std::unique_ptr<Work> Send(const void *d, int64_t bytes, int64_t peer, uint32_t tag) override;
  std::unique_ptr<Work> Recv(void *d, int64_t bytes, int64_t peer, uint32_t tag) override;
  std::unique_ptr<Work> Exchange(const std::vector<PeerOp> &ops) override;
  std::unique_ptr<Work> AllReduceSum16(uint16_t *d, int64_t n, Half type) override;
  std::unique_ptr<Work> ReduceSum16(uint16_t *d, int64_t n, int64_t root, Half type) override;
  std::unique_ptr<Work> AllGather16(uint16_t *d, int64_t shard) override;
  std::unique_ptr<Work> Broadcast16(uint16_t *d, int64_t n, int64_t root) override;
};

}  // namespace dst::guarded
