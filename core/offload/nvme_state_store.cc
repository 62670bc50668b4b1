#include "core/offload/nvme_state_store.h"

#include "core/common/test_hooks.h"

#include "core/common/log.h"
#include "core/offload/io_probe.h"
#include "core/offload/swap_file.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace dst {

NvmeStateStore::NvmeStateStore(std::vector<std::string> names, int64_t numel,
                               MemoryTracker *tracker, NvmeStoreOptions options)
    : StateStore(std::move(names), numel), tracker_(tracker), options_(std::move(options)) {}

// A clean shutdown removes the swap file (after a crash it stays).
NvmeStateStore::~NvmeStateStore() {
  if (!file_) return;
  (void)file_->io().WaitAll();
  file_->RemoveOnClose();
}

Status NvmeStateStore::Open() {
  if (names().size() > StatePiece::kMaxTensors)
    return InternalError("optimizer state: more tensors than a StatePiece holds");
  // No "aio" in the config: measure the drive and take its best, unless the
  // probe's file would not fit beside the swap file (DeepSpeed's defaults then).
  IoProbeOptions probe;
  probe.file_bytes = 32LL << 20;
  probe.queue_depths = {8, 32};
  probe.engine = options_.engine;
  const std::string dir = std::filesystem::path(options_.path).parent_path().string();
  const int64_t free_bytes = FreeBytesAt(dir);
  const int64_t state_bytes = 4 * std::max<int64_t>(numel(), 1) * int64_t(names().size());
  if (options_.probe_aio && free_bytes >= 0 && free_bytes < probe.file_bytes + state_bytes) {
    DST_LOG(kWarning, "offload",
            "nvme_path " + dir + " has " + std::to_string(free_bytes) +
                " bytes free: too few for the 32 MiB I/O probe beside the swap file; using the "
                "default aio settings (set an \"aio\" section, or run `dstrain io-probe` on "
                "a larger disk of the same kind, to choose them)");
    options_.probe_aio = false;
  }
  if (options_.probe_aio) {
    Result<IoProbeReport> report = ProbeIo(dir, probe);
    if (!report.ok()) {
      Status st = report.status();
      return st.context("probing nvme_path for the aio settings");
    }
    options_.aio.block_size = report.value().best.block_size;
    options_.aio.queue_depth = report.value().best.queue_depth;
    probed_ = report.value().best;
  }
  std::error_code ec;
  reopened_ = options_.resume && std::filesystem::exists(options_.path, ec);
  Result<std::unique_ptr<SwapFile>> file = (reopened_ ? SwapFile::Open : SwapFile::Create)(
      options_.path, std::max<int64_t>(numel(), 1), options_.piece_elements,
      int64_t(names().size()), options_.aio, options_.engine);
  if (!file.ok()) return file.status();
  file_ = std::move(file).value();
  const SwapGeometry &g = file_->geometry();
  const int64_t n = std::clamp<int64_t>(options_.buffer_count, 1, g.pieces);
  for (int64_t i = 0; i < n; ++i)
    buffers_.push_back(
        PieceBuffer{AlignedBuffer(size_t(g.slot_bytes), size_t(g.align), tracker_), {}, -1, 0});
  written_at_.assign(buffers_.size(), 0);
  current_ = file_->committed();
  return Status::Ok();
}

// An injected fault strikes once. Reads between passes are the next pass's.
IoFault NvmeStateStore::FaultFor(int64_t piece, IoOp op) {
  const int64_t step = in_pass_ ? pass_step_ : pass_step_ + 1;
  for (auto f = options_.faults.begin(); f != options_.faults.end(); ++f)
    if (f->step == step && f->piece == piece && f->op == op) {
      const IoFault fault = f->fault;
      options_.faults.erase(f);
      return fault;
    }
  return IoFault::kNone;
}

NvmeStateStore::PieceBuffer *NvmeStateStore::Holding(int64_t piece) {
  for (PieceBuffer &b : buffers_)
    if (b.state != BufferState::kFree && b.state != BufferState::kWriting && b.piece == piece)
      return &b;
  return nullptr;
}

Result<NvmeStateStore::PieceBuffer *> NvmeStateStore::FreeBuffer(bool may_wait) {
  for (PieceBuffer &b : buffers_)
    if (b.state == BufferState::kFree) return &b;
  PieceBuffer *oldest = nullptr;
  for (size_t i = 0; i < buffers_.size(); ++i)
    if (buffers_[i].state == BufferState::kWriting &&
        (oldest == nullptr || written_at_[i] < written_at_[size_t(oldest - buffers_.data())]))
      oldest = &buffers_[i];
  if (oldest == nullptr || !may_wait) return static_cast<PieceBuffer *>(nullptr);
  DST_RETURN_IF_ERROR(FinishWrite(oldest));
  return oldest;
}

Status NvmeStateStore::StartRead(int64_t piece, PieceBuffer *buffer) {
  const SwapGeometry &g = geometry();
  Result<uint64_t> t = file_->io().Submit({IoOp::kRead, buffer->bytes.data(), size_t(g.slot_bytes),
                                           g.SlotOffset(piece, current_.slot[size_t(piece)]),
                                           FaultFor(piece, IoOp::kRead)});
  if (!t.ok()) return t.status();
  buffer->state = BufferState::kReading;
  buffer->piece = piece;
  buffer->ticket = t.value();
  return Status::Ok();
}

Status NvmeStateStore::FinishRead(PieceBuffer *buffer) {
  const int64_t piece = buffer->piece;
  Status st = file_->io().Wait(buffer->ticket);
  const SwapGeometry &g = geometry();
  const int slot = current_.slot[size_t(piece)];
  if (st.ok() &&
      SlotChecksum(buffer->bytes.data(), size_t(g.slot_bytes)) != current_.checksum[size_t(piece)])
    st = IoError("the NVMe swap file " + file_->path() + " is corrupt: piece " +
                 std::to_string(piece) + " (slot " + std::to_string(slot) + ", offset " +
                 std::to_string(g.SlotOffset(piece, slot)) +
                 ") does not match the checksum its commit recorded; resume from a checkpoint");
  if (!st.ok()) {
    buffer->state = BufferState::kFree;
    buffer->piece = -1;
    return st.context("optimizer state of piece " + std::to_string(piece) + " on NVMe");
  }
  buffer->state = BufferState::kHeld;
  return Status::Ok();
}

Status NvmeStateStore::StartWrite(PieceBuffer *buffer) {
  const int64_t piece = buffer->piece;
  const SwapGeometry &g = geometry();
  const int slot = 1 - file_->committed().slot[size_t(piece)];
  current_.slot[size_t(piece)] = uint8_t(slot);
  current_.checksum[size_t(piece)] = SlotChecksum(buffer->bytes.data(), size_t(g.slot_bytes));
  Result<uint64_t> t =
      file_->io().Submit({IoOp::kWrite, buffer->bytes.data(), size_t(g.slot_bytes),
                          g.SlotOffset(piece, slot), FaultFor(piece, IoOp::kWrite)});
  if (!t.ok()) return t.status();
  buffer->state = BufferState::kWriting;
  buffer->ticket = t.value();
  written_at_[size_t(buffer - buffers_.data())] = ++write_order_;
  return Status::Ok();
}

Status NvmeStateStore::FinishWrite(PieceBuffer *buffer) {
  const int64_t piece = buffer->piece;
  Status st = file_->io().Wait(buffer->ticket);
  buffer->state = BufferState::kFree;
  buffer->piece = -1;
  return st.context("optimizer state of piece " + std::to_string(piece) + " on NVMe");
}

void NvmeStateStore::Prefetch(int64_t piece) {
  if (piece >= geometry().pieces || Holding(piece) != nullptr) return;
  Result<PieceBuffer *> b = FreeBuffer(/*may_wait=*/false);
  // No buffer free now: the piece is read when it is acquired. A failed
  // submit shows again then.
  if (b.ok() && b.value() != nullptr) (void)StartRead(piece, b.value());
}

// Pieces read ahead of the one being updated: every buffer but the held one
// and the one being written (at least one) with pipeline_read, none without.
int64_t NvmeStateStore::ReadAhead() const {
  if (!options_.pipeline_read) return 0;
  return std::max<int64_t>(1, buffers() - (options_.pipeline_write ? 2 : 1));
}

Status NvmeStateStore::BeginPass(int64_t step) {
  if (in_pass_) return InternalError("NVMe optimizer state: a pass began inside another");
  DST_RETURN_IF_ERROR(Flush());
  in_pass_ = true;
  pass_step_ = step;
  Prefetch(0);
  for (int64_t ahead = 1; ahead <= ReadAhead(); ++ahead) Prefetch(ahead);
  return Status::Ok();
}

Status NvmeStateStore::Acquire(int64_t begin, int64_t count, StatePiece *piece) {
  const SwapGeometry &g = geometry();
  const int64_t p = begin / g.piece_elements;
  if (!in_pass_ || begin != g.PieceBegin(p) || p >= g.pieces || count != g.PieceCount(p))
    return InternalError("NVMe optimizer state: elements [" + std::to_string(begin) + ", " +
                         std::to_string(begin + count) + ") are not piece " + std::to_string(p) +
                         " of a pass (pieces of " + std::to_string(g.piece_elements) + ")");
  PieceBuffer *b = Holding(p);
  if (b == nullptr) {
    Result<PieceBuffer *> free_buffer = FreeBuffer(/*may_wait=*/true);
    if (!free_buffer.ok()) return free_buffer.status();
    if (free_buffer.value() == nullptr)
      return InternalError("NVMe optimizer state: every piece buffer is held");
    b = free_buffer.value();
    DST_RETURN_IF_ERROR(StartRead(p, b));
  }
  if (b->state == BufferState::kReading) DST_RETURN_IF_ERROR(FinishRead(b));
  for (int64_t ahead = 1; ahead <= ReadAhead(); ++ahead) Prefetch(p + ahead);
  piece->begin = begin;
  piece->count = count;
  piece->tensors.fill(nullptr);
  for (size_t k = 0; k < names().size(); ++k) piece->tensors[k] = Tensor(b, k);
  return Status::Ok();
}

Status NvmeStateStore::Release(const StatePiece &piece, bool modified) {
  const int64_t p = piece.begin / piece_elements();
  PieceBuffer *b = Holding(p);
  if (b == nullptr || b->state != BufferState::kHeld)
    return InternalError("NVMe optimizer state: piece " + std::to_string(p) +
                         " released but not held");
  if (!modified) {
    b->state = BufferState::kFree;
    b->piece = -1;
    return Status::Ok();
  }
  DST_RETURN_IF_ERROR(StartWrite(b));
  return options_.pipeline_write ? Status::Ok() : FinishWrite(b);
}

Status NvmeStateStore::EndPass() {
  Status first = Status::Ok();
  for (PieceBuffer &b : buffers_) {
    Status st = Status::Ok();
    if (b.state == BufferState::kWriting) st = FinishWrite(&b);
    if (b.state == BufferState::kReading) {  // a prefetch nobody acquired
      st = file_->io().Wait(b.ticket);
      b.state = BufferState::kFree;
    }
    if (first.ok() && !st.ok()) first = std::move(st);
  }
  if (first.ok()) {
    CommitRecord record = current_;
    record.step = pass_step_;
    record.note = note_;
    first = file_->Commit(std::move(record));
  }
  if (!first.ok()) {
    AbortPass();
    return first;
  }
  current_ = file_->committed();
  in_pass_ = false;
  // The next pass starts from this commit: its first pieces are read now,
  // behind the forward and backward that come before it (a read error shows
  // when that pass acquires the piece).
  for (int64_t ahead = 0; ahead < ReadAhead(); ++ahead) Prefetch(ahead);
  return Status::Ok();
}

void NvmeStateStore::DropPrefetched() {
  for (PieceBuffer &b : buffers_)
    if (b.state == BufferState::kReading) {
      (void)file_->io().Wait(b.ticket);
      b.state = BufferState::kFree;
      b.piece = -1;
    }
}

void NvmeStateStore::AbortPass() {
  (void)file_->io().WaitAll();
  for (PieceBuffer &b : buffers_) {
    b.state = BufferState::kFree;
    b.piece = -1;
  }
  current_ = file_->committed();
  in_pass_ = false;
  dirty_ = false;
}

Status NvmeStateStore::Flush() {
  if (!dirty_) return Status::Ok();
  CommitRecord record = current_;
  record.step = file_->committed().step;
  // State written between passes (a checkpoint loaded, set_param) has no
  // engine note yet: a crash before the next pass resumes from the checkpoint.
  record.note.clear();
  DST_RETURN_IF_ERROR(file_->Commit(std::move(record)));
  current_ = file_->committed();
  dirty_ = false;
  return Status::Ok();
}

Status NvmeStateStore::LoadPiece(int64_t piece, PieceBuffer *buffer) const {
  auto *self = const_cast<NvmeStateStore *>(this);
  DST_RETURN_IF_ERROR(self->StartRead(piece, buffer));
  return self->FinishRead(buffer);
}

Status NvmeStateStore::VisitRange(const char *what, size_t k, int64_t begin, int64_t count,
                                  const RangeVisitor &visit) const {
  if (in_pass_ || k >= names().size() || begin < 0 || count < 0 || begin + count > numel())
    return InternalError(std::string("NVMe optimizer state: ") + what + " of tensor " +
                         std::to_string(k) + " [" + std::to_string(begin) + ", " +
                         std::to_string(begin + count) + ") outside the state or inside a pass");
  const_cast<NvmeStateStore *>(this)->DropPrefetched();
  const SwapGeometry &g = geometry();
  PieceBuffer *b = &buffers_[0];
  for (int64_t at = begin; at < begin + count;) {
    const int64_t p = at / g.piece_elements, offset = at - g.PieceBegin(p);
    const int64_t n = std::min(g.PieceCount(p) - offset, begin + count - at);
    DST_RETURN_IF_ERROR(LoadPiece(p, b));
    Status st = visit(b, Tensor(b, k) + offset, n, at - begin);
    if (b->state == BufferState::kHeld) b->state = BufferState::kFree;
    DST_RETURN_IF_ERROR(st);
    at += n;
  }
  return Status::Ok();
}

Status NvmeStateStore::Read(size_t k, int64_t begin, int64_t count, float *out) const {
  return VisitRange("Read", k, begin, count,
                    [&](PieceBuffer *, float *piece, int64_t n, int64_t done) {
                      std::memcpy(out + done, piece, size_t(n) * sizeof(float));
                      return Status::Ok();
                    });
}

Status NvmeStateStore::Write(size_t k, int64_t begin, int64_t count, const float *in) {
  return VisitRange("Write", k, begin, count,
                    [&](PieceBuffer *b, float *piece, int64_t n, int64_t done) {
                      std::memcpy(piece, in + done, size_t(n) * sizeof(float));
                      dirty_ = true;  // from here the current record names the uncommitted slot
                      DST_RETURN_IF_ERROR(StartWrite(b));
                      return FinishWrite(b);
                    });
}

std::vector<int64_t> NvmeStateStore::ResumableSteps() const {
  std::vector<int64_t> steps;
  if (reopened_)  // a commit without a note (the first, or after a checkpoint load) is no resume
                  // point
    for (const CommitRecord &r : file_->found())
      if (!r.note.empty()) steps.push_back(r.step);
  return steps;
}

Result<std::string> NvmeStateStore::ResumeAt(int64_t step) {
  DST_RETURN_IF_ERROR(file_->Rewind(step));
  current_ = file_->committed();
  resumed_step_ = step;
  note_ = current_.note;
  return current_.note;
}

Result<std::vector<InjectedIoFault>> ParseIoFaultInjection(int64_t rank) {
  std::vector<InjectedIoFault> faults;
#if !DSTRAIN_TEST_HOOKS
  (void)rank;
  return faults;
#else
  const char *text = std::getenv("DSTRAIN_INJECT_IO_FAULT");
  if (text == nullptr || *text == '\0') return faults;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    long long r = -1, s = -1, p = -1;
    char c1 = 0, c2 = 0, c3 = 0;
    std::string kind;
    std::stringstream one(item);
    const bool parsed = bool(one >> r >> c1 >> s >> c2 >> p >> c3) && bool(std::getline(one, kind));
    InjectedIoFault f{s, p, IoOp::kWrite, IoFault::kNone};
    if (kind == "read-error") f = {s, p, IoOp::kRead, IoFault::kError};
    if (kind == "read-short-once") f = {s, p, IoOp::kRead, IoFault::kShortThenRest};
    if (kind == "write-error") f.fault = IoFault::kError;
    if (kind == "write-short") f.fault = IoFault::kShortThenNoSpace;
    if (kind == "write-short-once") f.fault = IoFault::kShortThenRest;
    if (!parsed || c1 != ':' || c2 != ':' || c3 != ':' || r < 0 || s < 0 || p < 0 ||
        f.fault == IoFault::kNone)
      return InvalidArgument(
          "DSTRAIN_INJECT_IO_FAULT=\"" + std::string(text) +
          "\": expected rank:step:piece:kind items separated by commas, kind one of read-error, "
          "read-short-once, write-error, write-short, write-short-once");
    if (r == rank) faults.push_back(f);
  }
  return faults;
#endif
}

}  // namespace dst

namespace dst {

StateStoreMaker NvmeStateStoreMaker(const Config &config, int64_t rank,
                                    std::vector<InjectedIoFault> faults) {
  if (config.zero.offload_optimizer_device != "nvme") return nullptr;
  NvmeStoreOptions options;
  options.path = (std::filesystem::path(config.zero.offload_optimizer_nvme_path) /
                  ("dstrain_optimizer_rank" + std::to_string(rank) + ".swap"))
                     .string();
  options.piece_elements = config.zero.sub_group_size;
  options.buffer_count = config.zero.offload_optimizer_buffer_count;
  options.pipeline_read = config.zero.offload_optimizer_pipeline_read;
  options.pipeline_write = config.zero.offload_optimizer_pipeline_write;
  options.aio = config.aio;
  options.probe_aio = !config.aio.present;
  options.resume = config.runtime.resume_from_swap;
  if (const char *engine = std::getenv("DSTRAIN_IO_ENGINE"); engine && *engine)
    options.engine = engine;
  options.faults = std::move(faults);
  return [options](std::vector<std::string> names, int64_t numel, MemoryTracker *tracker) {
    return std::unique_ptr<StateStore>(
        std::make_unique<NvmeStateStore>(std::move(names), numel, tracker, options));
  };
}

}  // namespace dst
