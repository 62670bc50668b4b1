// Communication totals (count, bytes, seconds) per process group (dp, tp,
// pp — the pipeline's sends and receives count as pp) and operation, fed by
// each communicator's completion hook from its worker thread and read by
// metrics.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "core/comm/communicator.h"

namespace dst {

struct CommTotals {
  int64_t count = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

// The process groups a rank communicates over (metrics label "group").
enum class CommGroup { kDp = 0, kTp = 1, kPp = 2 };
inline constexpr int kNumCommGroups = 3;

class CommStats {
 public:
  static constexpr int kOps = kNumCommOps;

  void Record(CommGroup group, const CommRecord &r) {
    std::lock_guard<std::mutex> lock(mu_);
    CommTotals &t = totals_[static_cast<int>(group)][static_cast<int>(r.op)];
    ++t.count;
    t.bytes += r.bytes;
    t.seconds += r.seconds;
  }
  // Over every group.
  CommTotals Totals(CommOp op) const {
    std::lock_guard<std::mutex> lock(mu_);
    CommTotals sum;
    for (const auto &group : totals_) {
      const CommTotals &t = group[static_cast<int>(op)];
      sum.count += t.count, sum.bytes += t.bytes, sum.seconds += t.seconds;
    }
    return sum;
  }
  CommTotals Totals(CommGroup group, CommOp op) const {
    std::lock_guard<std::mutex> lock(mu_);
    return totals_[static_cast<int>(group)][static_cast<int>(op)];
  }

 private:
  mutable std::mutex mu_;
  std::array<std::array<CommTotals, kOps>, kNumCommGroups> totals_{};
};

}  // namespace dst
