#include "core/offload/param_swap.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace dst {

namespace {

int64_t AlignDown(int64_t n, int64_t align) {
  return n / align * align;
}
int64_t AlignUp(int64_t n, int64_t align) {
  return (n + align - 1) / align * align;
}

}  // namespace

ParamSwapOptions ParamSwapOptionsFor(const Config &config, int64_t rank) {
  ParamSwapOptions options;
  const ZeroConfig &zero = config.zero;
  if (zero.offload_param_device != "nvme" || zero.stage != 3) return options;
  options.path = (std::filesystem::path(zero.offload_param_nvme_path) /
                  ("dstrain_params_rank" + std::to_string(rank) + ".swap"))
                     .string();
  options.max_in_cpu = zero.offload_param_max_in_cpu;
  options.buffer_size = zero.offload_param_buffer_size;
  options.buffer_count = zero.offload_param_buffer_count;
  options.aio = config.aio;
  if (const char *engine = std::getenv("DSTRAIN_IO_ENGINE"); engine && *engine)
    options.engine = engine;
  return options;
}

namespace {
constexpr int64_t kPieceBytes = 4 << 20;  // a multiple of any O_DIRECT alignment
}

int64_t ParamSwapBufferBytes(int64_t bytes, int64_t window_bytes, int64_t buffer_count,
                             int64_t align) {
  const int64_t words = std::max<int64_t>(1, (bytes + 3) / 4);
  const int64_t slot = AlignUp(std::min(kPieceBytes / 4, words) * 4, align);
  const int64_t window = AlignUp(window_bytes, align) + 2 * align;
  return std::max<int64_t>(1, buffer_count) * window + 2 * slot;
}

Result<std::unique_ptr<ParamSwap>> ParamSwap::Create(const ParamSwapOptions &options,
                                                     MemoryTracker *tracker) {
  const std::string dir = std::filesystem::path(options.path).parent_path().string();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return IoError("zero_optimization.offload_param.nvme_path " + dir +
                   " is not a directory; create it or point nvme_path at one");
  // 4-byte words for SwapFile.
  const int64_t words = std::max<int64_t>(1, (options.bytes + 3) / 4);
  Result<std::unique_ptr<SwapFile>> file =
      SwapFile::Create(options.path, words, kPieceBytes / 4, 1, options.aio, options.engine);
  if (!file.ok()) return file.status();
  std::unique_ptr<ParamSwap> swap(new ParamSwap(std::move(file).value(), options.bytes));
  const SwapGeometry &g = swap->geometry();
  const size_t window = size_t(AlignUp(options.window_bytes, g.align) + 2 * g.align);
  for (int64_t i = 0; i < std::max<int64_t>(1, options.buffer_count); ++i)
    swap->windows_.push_back(
        WindowBuffer{AlignedBuffer(window, size_t(g.align), tracker), -1, 0, 0, {}, 0});
  for (AlignedBuffer &w : swap->write_)
    w = AlignedBuffer(size_t(g.slot_bytes), size_t(g.align), tracker);
  swap->pending_ = swap->file_->committed();
  return swap;
}

ParamSwap::ParamSwap(std::unique_ptr<SwapFile> file, int64_t bytes)
    : file_(std::move(file)), bytes_(bytes) {}

ParamSwap::~ParamSwap() {
  (void)file_->io().WaitAll();
  file_->RemoveOnClose();
}

int64_t ParamSwap::buffer_bytes() const {
  int64_t total = int64_t(write_[0].bytes() + write_[1].bytes());
  for (const WindowBuffer &w : windows_) total += int64_t(w.bytes.bytes());
  return total;
}

// ---------------------------------------------------------------- reading

Status ParamSwap::StartRead(WindowBuffer *w, int64_t key, int64_t begin, int64_t end) {
  const SwapGeometry &g = geometry();
  w->key = key;
  w->base = AlignDown(begin, g.align);
  w->end = AlignUp(end, g.align);
  w->used = ++clock_;
  w->tickets.clear();
  if (w->end - w->base > int64_t(w->bytes.bytes()))
    return InternalError("offload_param: a read of " + std::to_string(end - begin) +
                         " bytes does not fit a window of " + std::to_string(w->bytes.bytes()));
  // Pieces are whole multiples of the alignment: each piece's part is one
  // aligned read from the slot its commit names.
  const int64_t piece = piece_bytes();
  for (int64_t at = w->base; at < w->end;) {
    const int64_t k = at / piece;
    const int64_t stop = std::min(w->end, (k + 1) * piece);
    const int64_t offset = g.SlotOffset(k, file_->committed().slot[size_t(k)]) + (at - k * piece);
    Result<uint64_t> t = file_->io().Submit(
        {IoOp::kRead, w->bytes.data() + (at - w->base), size_t(stop - at), offset});
    if (!t.ok()) {
      w->key = -1;
      return t.status();
    }
    w->tickets.push_back(t.value());
    at = stop;
  }
  return Status::Ok();
}

Status ParamSwap::Finish(WindowBuffer *w) {
  Status first = Status::Ok();
  for (uint64_t t : w->tickets) {
    Status st = file_->io().Wait(t);
    if (first.ok() && !st.ok()) first = st;
  }
  w->tickets.clear();
  if (!first.ok()) w->key = -1;
  return first.ok() ? first : first.context("reading offloaded parameters");
}

ParamSwap::WindowBuffer *ParamSwap::Find(int64_t key, int64_t begin, int64_t end) {
  for (WindowBuffer &w : windows_)
    if (w.key == key && w.base <= begin && end <= w.end) return &w;
  return nullptr;
}

// The least recently used window with no read in flight.
ParamSwap::WindowBuffer *ParamSwap::Victim() {
  WindowBuffer *victim = nullptr;
  for (WindowBuffer &w : windows_)
    if (w.tickets.empty() && (!victim || w.used < victim->used)) victim = &w;
  return victim;
}

Status ParamSwap::Prefetch(int64_t key, int64_t begin, int64_t end) {
  if (writing_ || begin >= end || Find(key, begin, end)) return Status::Ok();
  WindowBuffer *w = Victim();
  return w ? StartRead(w, key, begin, end) : Status::Ok();
}

Result<const uint8_t *> ParamSwap::Window(int64_t key, int64_t begin, int64_t end) {
  if (writing_) return InternalError("offload_param: a read during the step's write pass");
  WindowBuffer *w = Find(key, begin, end);
  if (!w) {
    w = Victim();
    if (!w) {  // every window is being read: the oldest read finishes first
      w = &windows_[0];
      for (WindowBuffer &v : windows_)
        if (v.used < w->used) w = &v;
      DST_RETURN_IF_ERROR(Finish(w));
    }
    DST_RETURN_IF_ERROR(StartRead(w, key, begin, end));
  }
  DST_RETURN_IF_ERROR(Finish(w));
  w->used = ++clock_;
  return reinterpret_cast<const uint8_t *>(w->bytes.data()) + (begin - w->base);
}

Status ParamSwap::ForgetWindows() {
  Status first = Status::Ok();
  for (WindowBuffer &w : windows_) {
    Status st = Finish(&w);
    if (first.ok()) first = st;
    w.key = -1;
  }
  return first;
}

Status ParamSwap::Read(int64_t begin, int64_t n, void *out) {
  if (n <= 0) return Status::Ok();
  uint8_t *dst = static_cast<uint8_t *>(out);
  const int64_t span = int64_t(windows_[0].bytes.bytes()) - 2 * geometry().align;
  for (int64_t done = 0; done < n;) {
    const int64_t take = std::min(n - done, std::max<int64_t>(span, 1));
    Result<const uint8_t *> bytes = Window(-2, begin + done, begin + done + take);
    if (!bytes.ok()) return bytes.status();
    std::memcpy(dst + done, bytes.value(), size_t(take));
    done += take;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- writing

Status ParamSwap::BeginWrite() {
  DST_RETURN_IF_ERROR(ForgetWindows());
  writing_ = true;
  written_ = 0;
  current_ = 0;
  pending_ = file_->committed();
  return Status::Ok();
}

Status ParamSwap::FlushPiece() {
  const SwapGeometry &g = geometry();
  const int64_t k = (written_ - 1) / piece_bytes();
  AlignedBuffer &buffer = write_[current_];
  const uint8_t slot = uint8_t(1 - file_->committed().slot[size_t(k)]);
  pending_.slot[size_t(k)] = slot;
  pending_.checksum[size_t(k)] = SlotChecksum(buffer.data(), buffer.bytes());
  Result<uint64_t> t =
      file_->io().Submit({IoOp::kWrite, buffer.data(), buffer.bytes(), g.SlotOffset(k, slot)});
  if (!t.ok()) return t.status();
  write_ticket_[current_] = t.value();
  write_pending_[current_] = true;
  current_ ^= 1;
  if (write_pending_[current_]) {  // the other buffer's write must be done before reuse
    write_pending_[current_] = false;
    DST_RETURN_IF_ERROR(file_->io().Wait(write_ticket_[current_]));
  }
  std::memset(write_[current_].data(), 0, write_[current_].bytes());
  return Status::Ok();
}

Status ParamSwap::Append(const void *data, int64_t n) {
  if (!writing_) return InternalError("offload_param: Append outside a write pass");
  if (written_ + n > bytes_)
    return InternalError("offload_param: the step wrote past the swapped shard");
  const uint8_t *src = static_cast<const uint8_t *>(data);
  const int64_t piece = piece_bytes();
  while (n > 0) {
    const int64_t at = written_ % piece;
    const int64_t take = std::min(n, piece - at);
    std::memcpy(write_[current_].data() + at, src, size_t(take));
    written_ += take;
    src += take;
    n -= take;
    if (written_ % piece == 0 || written_ == bytes_) DST_RETURN_IF_ERROR(FlushPiece());
  }
  return Status::Ok();
}

Status ParamSwap::EndWrite(int64_t step) {
  if (written_ != bytes_) {
    AbortWrite();
    return InternalError("offload_param: the step wrote " + std::to_string(written_) + " of " +
                         std::to_string(bytes_) + " swapped bytes");
  }
  write_pending_[0] = write_pending_[1] = false;
  Status st = file_->io().WaitAll();
  pending_.step = step;
  if (st.ok()) st = file_->Commit(pending_);
  writing_ = false;
  if (!st.ok()) pending_ = file_->committed();
  return st.ok() ? st : st.context("writing the offloaded parameters");
}

void ParamSwap::AbortWrite() {
  write_pending_[0] = write_pending_[1] = false;
  (void)file_->io().WaitAll();
  writing_ = false;
  pending_ = file_->committed();
}

// Rewrites each piece [begin, begin + n) touches: read whole, patched, written
// to the other slot, committed.
Status ParamSwap::Write(int64_t begin, int64_t n, const void *in) {
  if (n <= 0) return Status::Ok();
  if (writing_) return InternalError("offload_param: a write during the step's write pass");
  DST_RETURN_IF_ERROR(ForgetWindows());
  const SwapGeometry &g = geometry();
  const int64_t piece = piece_bytes();
  const uint8_t *src = static_cast<const uint8_t *>(in);
  CommitRecord record = file_->committed();
  AlignedBuffer &buffer = write_[0];
  for (int64_t k = begin / piece; k * piece < begin + n; ++k) {
    const uint8_t slot = record.slot[size_t(k)];
    Result<uint64_t> t =
        file_->io().Submit({IoOp::kRead, buffer.data(), buffer.bytes(), g.SlotOffset(k, slot)});
    if (!t.ok()) return t.status();
    DST_RETURN_IF_ERROR(file_->io().Wait(t.value()));
    const int64_t lo = std::max(begin, k * piece), hi = std::min(begin + n, (k + 1) * piece);
    std::memcpy(buffer.data() + (lo - k * piece), src + (lo - begin), size_t(hi - lo));
    record.slot[size_t(k)] = uint8_t(1 - slot);
    record.checksum[size_t(k)] = SlotChecksum(buffer.data(), buffer.bytes());
    t = file_->io().Submit(
        {IoOp::kWrite, buffer.data(), buffer.bytes(), g.SlotOffset(k, uint8_t(1 - slot))});
    if (!t.ok()) return t.status();
    DST_RETURN_IF_ERROR(file_->io().Wait(t.value()));
  }
  Status st = file_->Commit(std::move(record));
  return st.ok() ? st : st.context("writing offloaded parameters");
}

}  // namespace dst
