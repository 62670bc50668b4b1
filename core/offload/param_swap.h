// ZeRO-Infinity's parameter tier: the part of a rank's ZeRO-3 parameter
// shard beyond offload_param.max_in_cpu elements lives in a swap file (one
// SwapFile: two slots per piece, alternating commit records), addressed in
// bytes of the shard's storage type [0, bytes).
//
//   Prefetch(key, range)   starts reading a byte range (a layer's share of
//                          the shard) into one of buffer_count windows
//   Window(key, range)     waits for it (or reads it now) and returns its bytes
//   BeginWrite / Append / EndWrite(step)
//                          the optimizer step writes the shard in order: each
//                          piece goes whole to the slot its commit does not
//                          name, and EndWrite commits (a crash mid-step
//                          leaves the previous step's parameters)
//   Read / Write           any range, synchronous (persistent tensors,
//                          get_param/set_param, checkpoints); Write rewrites
//                          the pieces it touches and commits
//
// Reads ahead are a layer's share at a time along the known layer order
// (ParameterPartition says which layers come next). Every write forgets
// the windows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/common/status.h"
#include "core/offload/swap_file.h"
#include "core/runtime/memory.h"

namespace dst {

struct ParamSwapOptions {
  std::string path;  // empty: parameters stay in memory
  // offload_param's limits: elements of the shard kept in memory, and the
  // largest share of one layer a window may hold (elements).
  int64_t max_in_cpu = 1000000000;
  int64_t buffer_size = 100000000;
  int64_t bytes = 0;         // the swapped part of the shard
  int64_t window_bytes = 0;  // the largest range a window holds
  int64_t buffer_count = 5;  // windows
  AioConfig aio;
  std::string engine = "auto";
};

// offload_param for `config` and rank `rank`: the swap file under
// offload_param.nvme_path, or an empty path unless its device is "nvme".
// DSTRAIN_IO_ENGINE (auto | io_uring | pread) forces an I/O engine.
ParamSwapOptions ParamSwapOptionsFor(const Config &config, int64_t rank);

// The memory a ParamSwap of `bytes` holds at alignment `align`:
// buffer_count windows of `window_bytes` (aligned, plus an alignment either
// side) and two write buffers of one piece (4 MiB, or all of it).
int64_t ParamSwapBufferBytes(int64_t bytes, int64_t window_bytes, int64_t buffer_count,
                             int64_t align = 4096);

class ParamSwap {
 public:
  // Creates the swap file (zeros; a full disk is an error naming the bytes)
  // and the buffers: `buffer_count` windows and two write buffers, charged
  // to the offload category.
  static Result<std::unique_ptr<ParamSwap>> Create(const ParamSwapOptions &options,
                                                   MemoryTracker *tracker);
  ~ParamSwap();  // waits for I/O in flight and removes the file

  int64_t bytes() const { return bytes_; }
  int64_t windows() const { return int64_t(windows_.size()); }
  int64_t buffer_bytes() const;  // every buffer this object holds
  const SwapFile &file() const { return *file_; }
  IoCounters io_counters() const { return file_->io().counters(); }
  int64_t committed_step() const { return file_->committed().step; }

  // Starts reading bytes [begin, end) for `key` unless a window holds or
  // reads it already; does nothing when every window is busy.
  Status Prefetch(int64_t key, int64_t begin, int64_t end);
  // Bytes [begin, end) of `key` in memory, valid until the next call.
  Result<const uint8_t *> Window(int64_t key, int64_t begin, int64_t end);
  // Any range, synchronous.
  Status Read(int64_t begin, int64_t n, void *out);
  Status Write(int64_t begin, int64_t n, const void *in);

  // A sequential rewrite of every byte, committed as step `step`.
  Status BeginWrite();
  Status Append(const void *data, int64_t n);
  Status EndWrite(int64_t step);
  void AbortWrite();
  bool writing() const { return writing_; }

 private:
  struct WindowBuffer {
    AlignedBuffer bytes;
    int64_t key = -1;
    int64_t base = 0, end = 0;  // aligned range held (or being read)
    std::vector<uint64_t> tickets;
    uint64_t used = 0;  // last touched (least recently used goes first)
  };
  ParamSwap(std::unique_ptr<SwapFile> file, int64_t bytes);
  const SwapGeometry &geometry() const { return file_->geometry(); }
  // The bytes of a piece in the swapped range: a multiple of the alignment
  // (one piece: its whole slot).
  int64_t piece_bytes() const {
    return geometry().pieces == 1 ? geometry().slot_bytes : geometry().piece_elements * 4;
  }
  // Starts reading the aligned cover of [begin, end) into `w`.
  Status StartRead(WindowBuffer *w, int64_t key, int64_t begin, int64_t end);
  Status Finish(WindowBuffer *w);
  WindowBuffer *Find(int64_t key, int64_t begin, int64_t end);
  WindowBuffer *Victim();
  Status ForgetWindows();
  // Writes the current write buffer (piece `writing_piece_`) to its other slot.
  Status FlushPiece();

  std::unique_ptr<SwapFile> file_;
  int64_t bytes_;
  std::vector<WindowBuffer> windows_;
  uint64_t clock_ = 0;
  AlignedBuffer write_[2];
  uint64_t write_ticket_[2] = {0, 0};
  bool write_pending_[2] = {false, false};
  int current_ = 0;
  bool writing_ = false;
  int64_t written_ = 0;  // bytes appended this pass
  CommitRecord pending_;
};

}  // namespace dst
