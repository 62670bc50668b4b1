// One rank's swap file for the optimizer's NVMe tier: its state tensors cut
// into pieces of sub_group_size elements, every piece in two slots so that a
// step writes the slot its last commit does not name, and two commit
// records (written alternately) that say which slot of each piece holds the
// committed state and its checksum. A crash at any point leaves the last
// commit readable and consistent (DeepSpeed's swap files are overwritten in
// place: a crash mid-step leaves them torn).
//
//   [header][record 0][record 1][piece 0 slot 0][piece 0 slot 1][piece 1 slot 0]...
//   a slot: tensor 0's piece, tensor 1's, ... (piece_elements floats each), padded
//
// Preallocated at start-up (a full disk is an error then, naming the bytes
// needed and free), opened once, O_DIRECT where the file system has it, and
// locked: a second process on the same file is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/common/status.h"
#include "core/config/config.h"
#include "core/offload/async_file.h"
#include "core/offload/slot_checksum.h"
#include "core/runtime/memory.h"

namespace dst {

// Bytes aligned for O_DIRECT, zeroed, charged to `category` while alive.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(size_t bytes, size_t align, MemoryTracker *tracker,
                MemoryCategory category = MemoryCategory::kOffload);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer &&other) noexcept;
  AlignedBuffer &operator=(AlignedBuffer &&other) noexcept;
  char *data() { return data_; }
  const char *data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void Reset();
  char *data_ = nullptr;
  size_t bytes_ = 0;
  MemoryTracker *tracker_ = nullptr;
  MemoryCategory category_ = MemoryCategory::kOffload;
};

struct SwapGeometry {
  int64_t numel = 0;           // elements of every tensor
  int64_t piece_elements = 0;  // elements per piece (the last may hold fewer)
  int64_t pieces = 0;
  int64_t tensors = 0;
  int64_t align = 4096;      // offsets, lengths and buffers (O_DIRECT)
  int64_t slot_bytes = 0;    // tensors x piece_elements x 4, rounded up to align
  int64_t record_bytes = 0;  // one commit record, rounded up to align

  static SwapGeometry For(int64_t numel, int64_t piece_elements, int64_t tensors, int64_t align);
  int64_t PieceBegin(int64_t piece) const { return piece * piece_elements; }
  int64_t PieceCount(int64_t piece) const;
  int64_t RecordOffset(int which) const { return align + which * record_bytes; }
  int64_t SlotOffset(int64_t piece, int slot) const {
    return align + 2 * record_bytes + (2 * piece + slot) * slot_bytes;
  }
  int64_t FileBytes() const { return SlotOffset(pieces, 0); }
};

// Which slot of each piece is current, and its checksum.
struct CommitRecord {
  static constexpr size_t kMaxNote = 1024;
  uint64_t sequence = 0;  // the newer of the two records wins
  int64_t step = 0;       // optimizer steps taken when it was committed
  std::vector<uint8_t> slot;
  std::vector<uint64_t> checksum;
  // What the engine needs to resume at this commit (its step count, loss
  // scaler): at most kMaxNote bytes, opaque here.
  std::string note;
};

class SwapFile {
 public:
  // Creates `path` afresh for `tensors` tensors of `numel` elements in
  // pieces of `piece_elements`; every slot reads as zeros and the first
  // record commits slot 0 of every piece at step 0.
  static Result<std::unique_ptr<SwapFile>> Create(const std::string &path, int64_t numel,
                                                  int64_t piece_elements, int64_t tensors,
                                                  const AioConfig &aio, std::string_view engine);
  // Opens the swap file a previous run left (it crashed, or was killed):
  // the header must describe this geometry, and the newer whole commit
  // record becomes committed(). Every slot it names reads back as committed
  // (checked against the record's checksums on read).
  static Result<std::unique_ptr<SwapFile>> Open(const std::string &path, int64_t numel,
                                                int64_t piece_elements, int64_t tensors,
                                                const AioConfig &aio, std::string_view engine);
  ~SwapFile();
  SwapFile(const SwapFile &) = delete;
  SwapFile &operator=(const SwapFile &) = delete;

  AsyncFile &io() { return *io_; }
  const AsyncFile &io() const { return *io_; }
  const SwapGeometry &geometry() const { return geometry_; }
  const std::string &path() const { return path_; }
  bool direct() const { return direct_; }  // opened with O_DIRECT
  const CommitRecord &committed() const { return committed_; }
  // Open: the whole records found, newest first (the committed one and
  // possibly the one before it).
  const std::vector<CommitRecord> &found() const { return found_; }
  // Open: makes the found record of `step` the committed one (the newer is
  // abandoned: the next commit overwrites it). Its slots still hold that
  // step's state unless a later pass overwrote them, which their checksums
  // tell on read.
  Status Rewind(int64_t step);
  // Makes `record` the committed state: the data it names is synced first,
  // then the record written to the other record slot and synced.
  Status Commit(CommitRecord record);
  // Removes the file when this object goes (a clean shutdown; after a crash it stays).
  void RemoveOnClose() { remove_ = true; }

 private:
  SwapFile(std::string path, int fd, SwapGeometry geometry, bool direct);
  // `path` opened (created when `create`) for direct I/O and locked; no I/O engine yet.
  static Result<std::unique_ptr<SwapFile>> OpenLocked(const std::string &path, bool create,
                                                      int64_t numel, int64_t piece_elements,
                                                      int64_t tensors);
  Status AttachIo(const AioConfig &aio, std::string_view engine);
  Status WriteHeader();
  std::string path_;
  int fd_;
  SwapGeometry geometry_;
  bool direct_;
  bool remove_ = false;
  std::unique_ptr<AsyncFile> io_;
  CommitRecord committed_;
  std::vector<CommitRecord> found_;
};

// Opens `path` read-write (creating it when `create`) with O_DIRECT, or
// without it where the file system refuses it (*direct false); -1 with
// errno on failure.
int OpenForDirectIo(const std::string &path, bool *direct, bool create = true);
// The alignment O_DIRECT needs on this file: what statx reports, at least 4 KiB.
int64_t DirectAlignment(int fd);

// Free bytes of the file system holding `directory` (statvfs; -1 if unknown).
int64_t FreeBytesAt(const std::string &directory);

}  // namespace dst
