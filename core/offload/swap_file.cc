#include "core/offload/swap_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

namespace dst {

namespace {

constexpr uint64_t kHeaderMagic = 0x3150415753545344ULL;  // "DSTSWAP1"
constexpr uint64_t kRecordMagic = 0x54494d4d4f435344ULL;  // "DSCOMMIT"

int64_t RoundUp(int64_t n, int64_t align) {
  return (n + align - 1) / align * align;
}

std::string Errno(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

std::string Gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", double(bytes) / double(1LL << 30));
  return text;
}

// flock, waiting up to 2 s: a killed run's file stays locked until the
// kernel has drained its io_uring, a moment after the process is gone.
int LockWithin2Seconds(int fd) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
    if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() > deadline) return errno;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int OpenForDirectIo(const std::string &path, bool *direct, bool create) {
  const int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
  *direct = true;
  int fd = ::open(path.c_str(), flags | O_DIRECT, 0600);
  if (fd < 0 && errno == EINVAL) {  // the file system has no O_DIRECT (tmpfs)
    *direct = false;
    fd = ::open(path.c_str(), flags, 0600);
  }
  return fd;
}

int64_t DirectAlignment(int fd) {
  int64_t align = 4096;
#ifdef STATX_DIOALIGN
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN))
    align = std::max<int64_t>({align, sx.stx_dio_mem_align, sx.stx_dio_offset_align});
#else
  (void)fd;
#endif
  return align;
}

namespace {

int64_t RecordBytes(int64_t pieces, int64_t align) {
  return RoundUp(32 + RoundUp(pieces, 8) + 8 * pieces + 8 + CommitRecord::kMaxNote + 8, align);
}

// The record's bytes: magic, sequence, step, pieces, slots (padded to 8),
// checksums, the note's length and bytes (kMaxNote), and the checksum of
// everything before it.
void EncodeRecord(const CommitRecord &r, char *out) {
  const int64_t pieces = int64_t(r.slot.size());
  auto put = [&out](const void *p, size_t n) {
    std::memcpy(out, p, n);
    out += n;
  };
  char *begin = out;
  put(&kRecordMagic, 8);
  put(&r.sequence, 8);
  put(&r.step, 8);
  put(&pieces, 8);
  put(r.slot.data(), r.slot.size());
  out = begin + 32 + RoundUp(pieces, 8);
  put(r.checksum.data(), r.checksum.size() * 8);
  const uint64_t note = std::min<uint64_t>(r.note.size(), CommitRecord::kMaxNote);
  put(&note, 8);
  std::memset(out, 0, CommitRecord::kMaxNote);
  std::memcpy(out, r.note.data(), note);
  out += CommitRecord::kMaxNote;
  const uint64_t self = SlotChecksum(begin, size_t(out - begin));
  put(&self, 8);
}

// The header's words: magic, version, then the geometry it was made for.
std::array<int64_t, 9> HeaderFields(const SwapGeometry &g) {
  return {int64_t(kHeaderMagic),
          2,  // 2: commit records carry a note
          g.numel,
          g.piece_elements,
          g.pieces,
          g.tensors,
          g.align,
          g.slot_bytes,
          g.record_bytes};
}

// The record in `in`, or nullopt when it is not a whole record for `pieces`
// pieces (never written, torn by a crash, or another file's).
std::optional<CommitRecord> DecodeRecord(const char *in, int64_t pieces) {
  uint64_t magic = 0;
  int64_t stored_pieces = 0;
  CommitRecord r;
  std::memcpy(&magic, in, 8);
  std::memcpy(&r.sequence, in + 8, 8);
  std::memcpy(&r.step, in + 16, 8);
  std::memcpy(&stored_pieces, in + 24, 8);
  if (magic != kRecordMagic || stored_pieces != pieces || r.sequence == 0) return std::nullopt;
  const char *checksums = in + 32 + RoundUp(pieces, 8);
  const char *note = checksums + 8 * pieces;
  const char *end = note + 8 + CommitRecord::kMaxNote;
  uint64_t self = 0;
  std::memcpy(&self, end, 8);
  if (SlotChecksum(in, size_t(end - in)) != self) return std::nullopt;
  r.slot.assign(reinterpret_cast<const uint8_t *>(in + 32),
                reinterpret_cast<const uint8_t *>(in + 32) + pieces);
  r.checksum.resize(size_t(pieces));
  std::memcpy(r.checksum.data(), checksums, size_t(pieces) * 8);
  uint64_t note_bytes = 0;
  std::memcpy(&note_bytes, note, 8);
  if (note_bytes > CommitRecord::kMaxNote) return std::nullopt;
  r.note.assign(note + 8, size_t(note_bytes));
  for (uint8_t slot : r.slot)
    if (slot > 1) return std::nullopt;
  return r;
}

}  // namespace

// ------------------------------------------------------------- AlignedBuffer

AlignedBuffer::AlignedBuffer(size_t bytes, size_t align, MemoryTracker *tracker,
                             MemoryCategory category)
    : bytes_(bytes), tracker_(tracker), category_(category) {
  void *p = nullptr;
  if (::posix_memalign(&p, align, std::max<size_t>(bytes, 1)) != 0) throw std::bad_alloc();
  data_ = static_cast<char *>(p);
  std::memset(data_, 0, bytes);
  if (tracker_) tracker_->Add(category_, int64_t(bytes_));
}

AlignedBuffer::~AlignedBuffer() {
  Reset();
}

AlignedBuffer::AlignedBuffer(AlignedBuffer &&other) noexcept {
  *this = std::move(other);
}

AlignedBuffer &AlignedBuffer::operator=(AlignedBuffer &&other) noexcept {
  if (this != &other) {
    Reset();
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    std::swap(tracker_, other.tracker_);
    std::swap(category_, other.category_);
  }
  return *this;
}

void AlignedBuffer::Reset() {
  if (data_ == nullptr) return;
  if (tracker_) tracker_->Release(category_, int64_t(bytes_));
  std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

// -------------------------------------------------------------- SwapGeometry

SwapGeometry SwapGeometry::For(int64_t numel, int64_t piece_elements, int64_t tensors,
                               int64_t align) {
  SwapGeometry g;
  g.numel = numel;
  g.piece_elements = std::max<int64_t>(1, std::min(piece_elements, numel));
  g.pieces = (numel + g.piece_elements - 1) / g.piece_elements;
  g.tensors = tensors;
  g.align = align;
  g.slot_bytes = RoundUp(std::max<int64_t>(1, tensors * g.piece_elements * 4), align);
  g.record_bytes = RecordBytes(g.pieces, align);
  return g;
}

int64_t SwapGeometry::PieceCount(int64_t piece) const {
  return std::min(piece_elements, numel - PieceBegin(piece));
}

// ------------------------------------------------------------------ SwapFile

int64_t FreeBytesAt(const std::string &directory) {
  struct statvfs fs {};
  if (::statvfs(directory.c_str(), &fs) != 0) return -1;
  return int64_t(fs.f_bavail) * int64_t(fs.f_frsize);
}

SwapFile::SwapFile(std::string path, int fd, SwapGeometry geometry, bool direct)
    : path_(std::move(path)), fd_(fd), geometry_(geometry), direct_(direct) {}

SwapFile::~SwapFile() {
  if (io_) (void)io_->WaitAll();
  io_.reset();
  ::close(fd_);
  if (remove_) ::unlink(path_.c_str());
}

Result<std::unique_ptr<SwapFile>> SwapFile::Create(const std::string &path, int64_t numel,
                                                   int64_t piece_elements, int64_t tensors,
                                                   const AioConfig &aio, std::string_view engine) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return IoError("offload_optimizer.nvme_path " + dir +
                   " is not a directory; create it or point nvme_path at one");
  // Not truncated before the lock: another run may be using it.
  Result<std::unique_ptr<SwapFile>> opened =
      OpenLocked(path, /*create=*/true, numel, piece_elements, tensors);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<SwapFile> file = std::move(opened).value();
  // A file this call could not make whole goes with it: it holds nothing
  // (truncated below), and a refused start leaves no swap file behind.
  file->RemoveOnClose();
  const SwapGeometry &g = file->geometry_;
  const int fd = file->fd_;
  const int64_t needed = g.FileBytes();
  const int64_t free_bytes = FreeBytesAt(dir);
  const std::string full = "the NVMe swap file " + path + " needs " + std::to_string(needed) +
                           " bytes (" + Gib(needed) + ") but " + dir + " has " +
                           std::to_string(free_bytes) + " bytes (" + Gib(free_bytes) +
                           ") free; free space there, point nvme_path at a larger disk, or "
                           "spread the state over more ranks";
  if (::ftruncate(fd, 0) != 0)
    return IoError("cannot truncate the NVMe swap file " + path + ": " + Errno(errno));
  if (free_bytes >= 0 && needed > free_bytes) return IoError(full);
  if (::fallocate(fd, 0, 0, needed) != 0) {
    const int err = errno;
    if (err == ENOSPC) return IoError(full);
    if (err != EOPNOTSUPP && err != ENOSYS)
      return IoError("cannot preallocate " + std::to_string(needed) + " bytes for " + path + ": " +
                     Errno(err));
    if (::ftruncate(fd, needed) != 0)  // no fallocate here: a sparse file of the size
      return IoError("cannot size the NVMe swap file " + path + ": " + Errno(errno));
  }
  DST_RETURN_IF_ERROR(file->AttachIo(aio, engine));
  DST_RETURN_IF_ERROR(file->WriteHeader());
  // Every slot reads as zeros: the first commit names slot 0 with their checksum.
  CommitRecord first;
  first.slot.assign(size_t(g.pieces), 0);
  const AlignedBuffer zeros(size_t(g.slot_bytes), size_t(g.align), nullptr);
  first.checksum.assign(size_t(g.pieces), SlotChecksum(zeros.data(), zeros.bytes()));
  DST_RETURN_IF_ERROR(file->Commit(std::move(first)));
  file->remove_ = false;  // made: it outlives a crash from here on
  return file;
}

Result<std::unique_ptr<SwapFile>> SwapFile::OpenLocked(const std::string &path, bool create,
                                                       int64_t numel, int64_t piece_elements,
                                                       int64_t tensors) {
  bool direct = true;
  const int fd = OpenForDirectIo(path, &direct, create);
  if (fd < 0)
    return IoError(std::string(create ? "cannot create" : "cannot open") + " the NVMe swap file " +
                   path + ": " + Errno(errno));
  if (const int err = LockWithin2Seconds(fd); err != 0) {
    ::close(fd);
    return IoError("the NVMe swap file " + path + " is in use by another process (" + Errno(err) +
                   "); give each run its own nvme_path");
  }
  const SwapGeometry g = SwapGeometry::For(numel, piece_elements, tensors, DirectAlignment(fd));
  return std::unique_ptr<SwapFile>(new SwapFile(path, fd, g, direct));
}

Status SwapFile::AttachIo(const AioConfig &aio, std::string_view engine) {
  Result<std::unique_ptr<AsyncFile>> io = OpenAsyncFile(path_, fd_, aio, engine);
  if (!io.ok()) return io.status();
  io_ = std::move(io).value();
  return Status::Ok();
}

Result<std::unique_ptr<SwapFile>> SwapFile::Open(const std::string &path, int64_t numel,
                                                 int64_t piece_elements, int64_t tensors,
                                                 const AioConfig &aio, std::string_view engine) {
  Result<std::unique_ptr<SwapFile>> opened =
      OpenLocked(path, /*create=*/false, numel, piece_elements, tensors);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<SwapFile> file = std::move(opened).value();
  const SwapGeometry &g = file->geometry_;
  DST_RETURN_IF_ERROR(file->AttachIo(aio, engine));
  // The header says what the file was made for.
  AlignedBuffer header(size_t(g.align), size_t(g.align), nullptr);
  Result<uint64_t> t = file->io_->Submit({IoOp::kRead, header.data(), header.bytes(), 0});
  if (!t.ok()) return t.status();
  DST_RETURN_IF_ERROR(file->io_->Wait(t.value()));
  std::array<int64_t, 9> fields{};
  std::memcpy(fields.data(), header.data(), sizeof fields);
  const std::array<int64_t, 9> expected = HeaderFields(g);
  // Magic and format version first: a file that is not a swap file (or whose
  // header was overwritten) must not be described as "another layout".
  if (fields[0] != expected[0] || fields[1] != expected[1])
    return IoError("the NVMe swap file " + path +
                   " has a corrupt header or is not a dstrain swap file (its first bytes are "
                   "not a swap header of this version); delete it and resume from a "
                   "checkpoint instead");
  if (fields != expected)
    return IoError("the NVMe swap file " + path + " was written for another layout (" +
                   std::to_string(fields[2]) + " elements in pieces of " +
                   std::to_string(fields[3]) + ", " + std::to_string(fields[5]) +
                   " tensors); this run has " + std::to_string(g.numel) + " in pieces of " +
                   std::to_string(g.piece_elements) + ", " + std::to_string(g.tensors) +
                   " tensors: resume from a checkpoint instead");
  // The newer of the two records that is whole.
  AlignedBuffer records(size_t(2 * g.record_bytes), size_t(g.align), nullptr);
  t = file->io_->Submit({IoOp::kRead, records.data(), records.bytes(), g.RecordOffset(0)});
  if (!t.ok()) return t.status();
  DST_RETURN_IF_ERROR(file->io_->Wait(t.value()));
  for (int which = 0; which < 2; ++which) {
    std::optional<CommitRecord> r = DecodeRecord(records.data() + which * g.record_bytes, g.pieces);
    if (r) file->found_.push_back(std::move(*r));
  }
  if (file->found_.empty())
    return IoError("the NVMe swap file " + path +
                   " holds no whole commit record; resume from a checkpoint instead");
  std::sort(file->found_.begin(), file->found_.end(),
            [](const CommitRecord &a, const CommitRecord &b) { return a.sequence > b.sequence; });
  file->committed_ = file->found_.front();
  return file;
}

Status SwapFile::Rewind(int64_t step) {
  for (const CommitRecord &r : found_)
    if (r.step == step) {
      committed_ = r;
      return Status::Ok();
    }
  std::string held;
  for (const CommitRecord &r : found_) {
    if (!held.empty()) held += ", ";
    held += std::to_string(r.step);
  }
  return IoError("the NVMe swap file " + path_ + " holds the commits of steps " + held +
                 ", not step " + std::to_string(step) + "; resume from a checkpoint instead");
}

Status SwapFile::WriteHeader() {
  AlignedBuffer header(size_t(geometry_.align), size_t(geometry_.align), nullptr);
  const std::array<int64_t, 9> fields = HeaderFields(geometry_);
  std::memcpy(header.data(), fields.data(), sizeof fields);
  Result<uint64_t> t = io_->Submit({IoOp::kWrite, header.data(), header.bytes(), 0});
  if (!t.ok()) return t.status();
  return io_->Wait(t.value());
}

Status SwapFile::Commit(CommitRecord record) {
  record.sequence = committed_.sequence + 1;
  DST_RETURN_IF_ERROR(io_->Sync());  // the slots it names are on the device first
  AlignedBuffer bytes(size_t(geometry_.record_bytes), size_t(geometry_.align), nullptr);
  EncodeRecord(record, bytes.data());
  Result<uint64_t> t = io_->Submit({IoOp::kWrite, bytes.data(), bytes.bytes(),
                                    geometry_.RecordOffset(int(record.sequence % 2))});
  if (!t.ok()) return t.status();
  DST_RETURN_IF_ERROR(io_->Wait(t.value()));
  DST_RETURN_IF_ERROR(io_->Sync());
  committed_ = std::move(record);
  return Status::Ok();
}

}  // namespace dst
