// Where an optimizer's state lives: named flat fp32 tensors aligned element
// for element with the parameter range the optimizer steps (the fp32 master
// weights under mixed precision first, then exp_avg / exp_avg_sq or
// momentum_buffer). The optimizer reads and writes them a piece at a time
// (Acquire, update, Release), so a store that keeps the state somewhere else
// than memory — NVMe, streamed through a few buffers (core/offload) — plugs
// in without the optimizer or the checkpoint code changing.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/status.h"
#include "core/runtime/memory.h"

namespace dst {

// Elements [begin, begin + count) of every state tensor.
struct StatePiece {
  static constexpr size_t kMaxTensors = 4;  // master + up to three optimizer states
  int64_t begin = 0, count = 0;
  std::array<float *, kMaxTensors> tensors{};
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // "resident" (memory) or "nvme" (core/offload).
  virtual const char *kind() const = 0;
  const std::vector<std::string> &names() const { return names_; }
  int64_t numel() const { return numel_; }

  // Creates what the store needs outside memory (a swap file); called once
  // before anything else.
  virtual Status Open() { return Status::Ok(); }
  // Pieces start at multiples of this and hold at most this many elements.
  virtual int64_t piece_elements() const { return numel_; }
  // A pass over the pieces in order (an optimizer step: Acquire, update,
  // Release each piece once), committed by EndPass as one unit of `step`, or
  // forgotten by AbortPass: the state is then what it was before BeginPass.
  virtual Status BeginPass(int64_t step) {
    (void)step;
    return Status::Ok();
  }
  virtual Status EndPass() { return Status::Ok(); }
  virtual void AbortPass() {}
  // Makes what Write changed between passes durable.
  virtual Status Flush() { return Status::Ok(); }
  // Makes [begin, begin + count) of every tensor readable and writable
  // through piece->tensors until Release.
  virtual Status Acquire(int64_t begin, int64_t count, StatePiece *piece) = 0;
  // Done with a piece; `modified`: it was written (a store elsewhere writes it back).
  virtual Status Release(const StatePiece &piece, bool modified) = 0;
  // Copies elements [begin, begin + count) of tensor k out / in (checkpoints).
  virtual Status Read(size_t k, int64_t begin, int64_t count, float *out) const = 0;
  virtual Status Write(size_t k, int64_t begin, int64_t count, const float *in) = 0;
  // Tensor k whole in memory, or null when the store keeps it elsewhere (a
  // checkpoint then copies it through Read).
  virtual const float *Resident(size_t k) const {
    (void)k;
    return nullptr;
  }

  // Crash resume, for a store that outlives its process (NVMe): `note`
  // (the engine's state after the step) is committed with each pass from
  // now on; ResumableSteps are the steps a previous run's committed state
  // can be taken back at (newest first; empty: none, a fresh store), and
  // ResumeAt takes one and returns the note committed with it.
  virtual void SetCommitNote(std::string note) { (void)note; }
  virtual std::vector<int64_t> ResumableSteps() const { return {}; }
  virtual Result<std::string> ResumeAt(int64_t step) {
    return StateError("the optimizer state lives in memory: there is no step " +
                      std::to_string(step) + " to resume at");
  }

 protected:
  StateStore(std::vector<std::string> names, int64_t numel)
      : names_(std::move(names)), numel_(numel) {}

 private:
  std::vector<std::string> names_;
  int64_t numel_;
};

// Every tensor in memory, charged to optimizer_state: the host's, or
// `memory`'s (a device: Resident is then null and Read/Write copy).
class ResidentStateStore final : public StateStore {
 public:
  ResidentStateStore(std::vector<std::string> names, int64_t numel, MemoryTracker *tracker,
                     MemoryResource *memory = nullptr);
  const char *kind() const override { return "resident"; }
  Status Acquire(int64_t begin, int64_t count, StatePiece *piece) override;
  Status Release(const StatePiece &, bool) override { return Status::Ok(); }
  Status Read(size_t k, int64_t begin, int64_t count, float *out) const override;
  Status Write(size_t k, int64_t begin, int64_t count, const float *in) override;
  const float *Resident(size_t k) const override { return memory_ ? nullptr : tensors_[k].data(); }
  float *data(size_t k) { return tensors_[k].data(); }

 private:
  Status CheckRange(size_t k, int64_t begin, int64_t count) const;
  MemoryResource *memory_;
  std::vector<Buffer<float>> tensors_;
};

}  // namespace dst
