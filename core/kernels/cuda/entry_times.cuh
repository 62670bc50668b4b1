// Each kernel-table entry's device time, summed by entry
// (DSTRAIN_CUDA_KERNEL_TIMES=1): where a device training step's time goes
// without a profiler on the machine. An entry's time is from an event
// recorded on the stream before its first kernel to one after its last, so
// it counts the device's work for the entry and none of the host's queueing;
// the gaps between entries (the device idle, waiting for the host) are the
// step's time less their sum. Printed to stderr when the context closes.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dst::cuda {

class EntryTimes {
 public:
  EntryTimes() {
    const char *on = std::getenv("DSTRAIN_CUDA_KERNEL_TIMES");
    on_ = on != nullptr && on[0] != '\0' && on[0] != '0';
  }
  EntryTimes(const EntryTimes &) = delete;
  EntryTimes &operator=(const EntryTimes &) = delete;
  ~EntryTimes() {
    for (const Pending &p : pending_) Release(p);
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }

  bool on() const { return on_; }

  // Marks an entry's start on `stream`: the event to close it with.
  cudaEvent_t Begin(cudaStream_t stream) {
    cudaEvent_t e = Take();
    if (e) cudaEventRecord(e, stream);
    return e;
  }
  // Marks its end; every kPending entries the stream is waited for and
  // their times summed (the one host wait this adds).
  void End(const char *entry, cudaEvent_t begin, cudaStream_t stream) {
    cudaEvent_t end = Take();
    if (!end) {
      free_.push_back(begin);
      return;
    }
    cudaEventRecord(end, stream);
    pending_.push_back({entry, begin, end});
    if (pending_.size() >= kPending) Drain();
  }

  // Sums what is pending and prints each entry's calls, total and share,
  // the largest first.
  void Print() {
    Drain();
    double all = 0;
    std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
    for (const auto &r : rows) all += r.second.ms;
    std::sort(rows.begin(), rows.end(),
              [](const auto &a, const auto &b) { return a.second.ms > b.second.ms; });
    std::fprintf(stderr, "dstrain: CUDA kernel-table entries' device time (%.1f ms in all)\n", all);
    std::fprintf(stderr, "  %-28s %8s %12s %10s %6s\n", "entry", "calls", "total ms", "mean us",
                 "share");
    for (const auto &[name, t] : rows)
      std::fprintf(stderr, "  %-28s %8ld %12.2f %10.1f %5.1f%%\n", name.c_str(), t.calls, t.ms,
                   1e3 * t.ms / double(t.calls), all > 0 ? 100 * t.ms / all : 0.0);
  }

 private:
  static constexpr size_t kPending = 4096;
  struct Pending {
    const char *entry;
    cudaEvent_t begin, end;
  };
  struct Total {
    double ms = 0;
    long calls = 0;
  };

  cudaEvent_t Take() {
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return e;
  }
  void Release(const Pending &p) {
    free_.push_back(p.begin);
    free_.push_back(p.end);
  }
  void Drain() {
    if (pending_.empty()) return;
    cudaEventSynchronize(pending_.back().end);
    for (const Pending &p : pending_) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, p.begin, p.end) == cudaSuccess) {
        Total &t = totals_[p.entry];
        t.ms += ms;
        ++t.calls;
      }
      Release(p);
    }
    cudaGetLastError();  // an entry that failed left its events unrecorded
    pending_.clear();
  }

  bool on_ = false;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  std::map<std::string, Total> totals_;
};

// Times the enclosing entry when EntryTimes is on: Begin at construction,
// End at scope exit (every return path).
class EntryScope {
 public:
  EntryScope(EntryTimes &times, const char *entry, cudaStream_t stream)
      : times_(times), entry_(entry), stream_(stream) {
    if (times_.on()) begin_ = times_.Begin(stream_);
  }
  ~EntryScope() {
    if (begin_) times_.End(entry_, begin_, stream_);
  }
  EntryScope(const EntryScope &) = delete;
  EntryScope &operator=(const EntryScope &) = delete;

 private:
  EntryTimes &times_;
  const char *entry_;
  cudaStream_t stream_;
  cudaEvent_t begin_ = nullptr;
};

}  // namespace dst::cuda
