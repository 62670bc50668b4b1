// Liveness of the ranks of a job, through the rendezvous store: each rank's
// Heartbeat thread writes "<beats> <progress>" under kBeatKey + rank every
// interval. A process that is stopped (SIGSTOP, a debugger) or hung in the
// kernel stops beating; one that is alive but elsewhere (in user code
// between train_batch calls) beats on with its progress (the step it last
// entered) falling behind. A rank waiting in a collective reads its peers'
// beats to tell which of them stalled (communicator.h's StallWatch).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/store.h"
#include "core/common/abort_signal.h"

namespace dst {

inline constexpr const char *kBeatKey = "__dstrain/beat/";
inline constexpr std::chrono::milliseconds kBeatInterval(400);

class Heartbeat {
 public:
  // Starts beating for `rank` (the store must outlive this object). Once
  // `abort` is raised, the next beat (within 100 ms) and every later one
  // says so, and the peers waiting on this rank name the abort.
  Heartbeat(Store *store, int64_t rank, std::shared_ptr<const AbortSignal> abort = nullptr);
  ~Heartbeat();
  Heartbeat(const Heartbeat &) = delete;
  Heartbeat &operator=(const Heartbeat &) = delete;
  // What this rank has reached (the engine: the step it last entered).
  void SetProgress(int64_t progress) { progress_.store(progress); }

 private:
  void Run();
  Store *store_;
  int64_t rank_;
  std::shared_ptr<const AbortSignal> abort_;
  std::atomic<int64_t> progress_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after everything it uses exists
};

struct Beat {
  int64_t beats = -1, progress = -1;  // -1: none published yet
  bool aborted = false;               // the rank's engine was aborted
};
// The last beat `rank` published (-1s when none or unreadable).
Beat ReadBeat(Store &store, int64_t rank);
// "rank N aborted ..." when `rank`'s last beat says its engine was aborted;
// "" otherwise.
std::string DescribeAbortedRank(Store &store, int64_t rank);

// Watches the peers of a group while this rank waits in one of its
// operations: a peer whose beats stop for `stall_after` is stalled.
class StallWatch {
 public:
  StallWatch(Store *store, std::vector<int64_t> peers, std::chrono::milliseconds stall_after)
      : store_(store), peers_(std::move(peers)), stall_after_(stall_after) {}
  // Reads every peer's beat (at most once per beat interval); returns a
  // description of the first stalled peer, or "" when none is.
  std::string Check();
  // The first peer whose engine was aborted, described ("" when none); reads
  // every peer's beat now.
  std::string Aborted();
  // After an operation timed out with every peer beating: the peers whose
  // progress is behind `self`'s (alive, but elsewhere — in user code between
  // train_batch calls), described; "" when none is.
  std::string Behind(int64_t self);

 private:
  struct Seen {
    Beat beat;
    std::chrono::steady_clock::time_point since;  // when `beat` was first seen
  };
  Store *store_;
  std::vector<int64_t> peers_;
  std::chrono::milliseconds stall_after_;
  std::vector<Seen> seen_;
  std::chrono::steady_clock::time_point last_read_{};
};

}  // namespace dst
