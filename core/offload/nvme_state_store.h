// The optimizer's NVMe tier: a StateStore whose tensors (fp32 master weights,
// exp_avg, exp_avg_sq) live in one swap file per rank, moved through
// `buffer_count` piece buffers. A step is a pass over the pieces in order:
//
//   BeginPass(step)                       reads piece 0 (and 1 with pipeline_read)
//   Acquire(piece i)  update  Release     waits for i's read, starts i + 1's;
//                                         writes i to the slot the last commit does
//                                         not name (waited at once without pipeline_write)
//   EndPass()                             waits for the writes, fdatasync, commit record;
//                                         with pipeline_read the next pass's first
//                                         pieces are read from here on
//
// AbortPass() forgets a failed pass: the last commit still names the state
// before it. Read and Write (checkpoints, set_param) work between passes on
// the current state; Write goes to the uncommitted slot and Flush (or the
// next pass) commits it. Every slot read is checked against the checksum its
// commit recorded.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/offload/io_probe.h"
#include "core/offload/swap_file.h"
#include "core/optim/optimizer.h"
#include "core/optim/state_store.h"

namespace dst {

// Test hook (DSTRAIN_INJECT_IO_FAULT): request `op` of piece `piece` during
// the pass of step `step` suffers `fault`, once.
struct InjectedIoFault {
  int64_t step = 0, piece = 0;
  IoOp op = IoOp::kWrite;
  IoFault fault = IoFault::kNone;
};

struct NvmeStoreOptions {
  std::string path;  // the swap file
  int64_t piece_elements = 1000000000;
  int64_t buffer_count = 4;
  bool pipeline_read = false, pipeline_write = false;
  AioConfig aio;
  std::string engine = "auto";  // auto | io_uring | pread
  std::vector<InjectedIoFault> faults;
  // Open the swap file a crashed run left, if there is one, at its last
  // commit (committed_step(); ResumeAt picks another) instead of creating
  // it afresh.
  bool resume = false;
  // Measure the drive at Open (a few 32 MiB passes, well under a second on
  // an SSD) and use the best aio block size and queue depth.
  bool probe_aio = false;
};

class NvmeStateStore final : public StateStore {
 public:
  NvmeStateStore(std::vector<std::string> names, int64_t numel, MemoryTracker *tracker,
                 NvmeStoreOptions options);
  ~NvmeStateStore() override;
  const char *kind() const override { return "nvme"; }
  Status Open() override;
  int64_t piece_elements() const override { return geometry().piece_elements; }
  Status BeginPass(int64_t step) override;
  Status EndPass() override;
  void AbortPass() override;
  Status Flush() override;
  Status Acquire(int64_t begin, int64_t count, StatePiece *piece) override;
  Status Release(const StatePiece &piece, bool modified) override;
  Status Read(size_t k, int64_t begin, int64_t count, float *out) const override;
  Status Write(size_t k, int64_t begin, int64_t count, const float *in) override;

  const SwapFile &file() const { return *file_; }
  const SwapGeometry &geometry() const { return file_->geometry(); }
  IoCounters io_counters() const { return file_->io().counters(); }
  int64_t buffers() const { return int64_t(buffers_.size()); }
  int64_t committed_step() const { return file_->committed().step; }
  // The aio settings in use, and whether Open measured them.
  const AioConfig &aio() const { return options_.aio; }
  bool aio_probed() const { return probed_.block_size > 0; }
  void RemoveOnClose() { file_->RemoveOnClose(); }
  void SetCommitNote(std::string note) override { note_ = std::move(note); }
  std::vector<int64_t> ResumableSteps() const override;
  Result<std::string> ResumeAt(int64_t step) override;
  int64_t resumed_step() const { return resumed_step_; }  // -1: started afresh

 private:
  enum class BufferState { kFree, kReading, kHeld, kWriting };
  struct PieceBuffer {
    AlignedBuffer bytes;
    BufferState state = BufferState::kFree;
    int64_t piece = -1;
    uint64_t ticket = 0;
  };

  IoFault FaultFor(int64_t piece, IoOp op);
  PieceBuffer *Holding(int64_t piece);
  // A free buffer, waiting for the oldest write to finish if none is.
  Result<PieceBuffer *> FreeBuffer(bool may_wait);
  Status StartRead(int64_t piece, PieceBuffer *buffer);
  // The read finished and the slot's bytes match its recorded checksum.
  Status FinishRead(PieceBuffer *buffer);
  Status FinishWrite(PieceBuffer *buffer);
  Status StartWrite(PieceBuffer *buffer);
  void Prefetch(int64_t piece);
  int64_t ReadAhead() const;
  // Between passes: the next pass's reads ahead are waited for and forgotten.
  void DropPrefetched();
  // Reads the current slot of `piece` into `buffer` and waits (between passes).
  Status LoadPiece(int64_t piece, PieceBuffer *buffer) const;
  // Between passes: loads each piece that tensor k's [begin, begin + count)
  // overlaps and calls `visit` with its part (elements, position in the range).
  using RangeVisitor =
      std::function<Status(PieceBuffer *buffer, float *part, int64_t n, int64_t done)>;
  Status VisitRange(const char *what, size_t k, int64_t begin, int64_t count,
                    const RangeVisitor &visit) const;
  float *Tensor(PieceBuffer *buffer, size_t k) const {
    return reinterpret_cast<float *>(buffer->bytes.data()) + k * size_t(piece_elements());
  }

  MemoryTracker *tracker_;
  NvmeStoreOptions options_;
  IoProbeResult probed_;
  std::unique_ptr<SwapFile> file_;
  mutable std::vector<PieceBuffer> buffers_;
  CommitRecord current_;   // the committed record plus this pass's (or Write's) new slots
  std::string note_;       // committed with every pass (SetCommitNote)
  bool reopened_ = false;  // Open found a previous run's file (resume)
  int64_t resumed_step_ = -1;
  bool in_pass_ = false, dirty_ = false;
  int64_t pass_step_ = 0;
  uint64_t write_order_ = 0;
  std::vector<uint64_t> written_at_;  // per buffer: order of its write (oldest first)
};

// DSTRAIN_INJECT_IO_FAULT="R:S:P:KIND[,...]": rank R's request at step S,
// piece P; KIND read-error | write-error | write-short (short, then ENOSPC)
// | write-short-once | read-short-once (short, then the rest).
Result<std::vector<InjectedIoFault>> ParseIoFaultInjection(int64_t rank);

// The optimizer's store maker for `config`: the NVMe tier with rank
// `rank`'s swap file under offload_optimizer.nvme_path, or null (memory)
// unless offload_optimizer.device is "nvme". DSTRAIN_IO_ENGINE (auto |
// io_uring | pread) forces an I/O engine.
StateStoreMaker NvmeStateStoreMaker(const Config &config, int64_t rank,
                                    std::vector<InjectedIoFault> faults);

}  // namespace dst
