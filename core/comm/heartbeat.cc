#include "core/comm/heartbeat.h"

#include <sstream>
#include <string>

namespace dst {

Heartbeat::Heartbeat(Store *store, int64_t rank, std::shared_ptr<const AbortSignal> abort)
    : store_(store), rank_(rank), abort_(std::move(abort)), thread_([this] { Run(); }) {}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Heartbeat::Run() {
  const std::string key = kBeatKey + std::to_string(rank_);
  // The wait between beats is cut into slices so that an abort is told to
  // the peers within one slice (raising the signal cannot notify a
  // condition variable: it may come from a thread that must not block).
  constexpr std::chrono::milliseconds kSlice(100);
  for (int64_t beats = 1;; ++beats) {
    const bool aborted = Raised(abort_.get());
    const std::string text = std::to_string(beats) + " " + std::to_string(progress_.load()) +
                             (aborted ? " aborted" : "");
    (void)store_->Set(key, std::vector<uint8_t>(text.begin(), text.end()));
    std::unique_lock<std::mutex> lock(mu_);
    bool stop = false;
    for (auto waited = std::chrono::milliseconds(0); waited < kBeatInterval; waited += kSlice) {
      stop = cv_.wait_for(lock, kSlice, [&] { return stopping_; });
      if (stop || (!aborted && Raised(abort_.get()))) break;
    }
    // Stopping: an abort raised since the last beat is still told.
    if (stop && (aborted || !Raised(abort_.get()))) return;
    if (stop) {
      lock.unlock();
      const std::string last = std::to_string(beats + 1) + " " +
                               std::to_string(progress_.load()) + " aborted";
      (void)store_->SetWithin(key, std::vector<uint8_t>(last.begin(), last.end()),
                              std::chrono::milliseconds(500));
      return;
    }
  }
}

Beat ReadBeat(Store &store, int64_t rank) {
  Beat beat;
  Result<std::vector<uint8_t>> value =
      store.Get(kBeatKey + std::to_string(rank), std::chrono::milliseconds(1));
  if (!value.ok()) return beat;
  std::istringstream in(std::string(value->begin(), value->end()));
  std::string mark;
  in >> beat.beats >> beat.progress >> mark;
  beat.aborted = mark == "aborted";
  return beat;
}

std::string DescribeAbortedRank(Store &store, int64_t rank) {
  if (!ReadBeat(store, rank).aborted) return "";
  return "rank " + std::to_string(rank) +
         " aborted: its program called dst_engine_abort (Engine.abort), so it will not take part "
         "any more (see that rank's output for why)";
}

std::string StallWatch::Aborted() {
  for (int64_t peer : peers_) {
    std::string aborted = DescribeAbortedRank(*store_, peer);
    if (!aborted.empty()) return aborted;
  }
  return "";
}

std::string StallWatch::Check() {
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  if (now - last_read_ < kBeatInterval) return "";
  last_read_ = now;
  if (seen_.size() != peers_.size()) seen_.assign(peers_.size(), Seen{Beat{}, now});
  for (size_t i = 0; i < peers_.size(); ++i) {
    const Beat beat = ReadBeat(*store_, peers_[i]);
    if (beat.beats < 0) continue;  // not beating yet (or the store is gone): no verdict
    if (beat.aborted) return DescribeAbortedRank(*store_, peers_[i]);
    Seen &seen = seen_[i];
    if (beat.beats != seen.beat.beats) {
      seen = Seen{beat, now};
      continue;
    }
    const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(now - seen.since);
    if (quiet < stall_after_) continue;
    // A rank whose store connection closed (killed, crashed) died: say so,
    // not that it stalled.
    const std::string lost = DescribeLostRanks(*store_, std::chrono::milliseconds(1));
    if (lost.find("died first") != std::string::npos) return lost;
    return "rank " + std::to_string(peers_[i]) + " has stalled: no heartbeat for " +
           std::to_string(quiet.count() / 1000.0).substr(0, 4) +
           " s (its process is stopped — SIGSTOP, a debugger — or hung in the kernel; its "
           "last heartbeat reported step " +
           std::to_string(beat.progress) + ")";
  }
  return "";
}

std::string StallWatch::Behind(int64_t self) {
  const Beat mine = ReadBeat(*store_, self);
  if (mine.progress < 0) return "";
  for (int64_t peer : peers_) {
    const Beat beat = ReadBeat(*store_, peer);
    if (beat.beats >= 0 && beat.progress < mine.progress)
      return "rank " + std::to_string(peer) +
             " is alive (its heartbeat goes on) but has not "
             "reached step " +
             std::to_string(mine.progress) +
             " (its last heartbeat reported "
             "step " +
             std::to_string(beat.progress) +
             "): it is busy outside train_batch, e.g. "
             "in user code between two steps";
  }
  return "";
}

}  // namespace dst
