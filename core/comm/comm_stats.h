// Per-operation communication totals (count, bytes, seconds), fed by a
// communicator's completion hook from its worker thread and read by metrics.
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

class CommStats {
 public:
  static constexpr int kOps = kNumCommOps;

  void Record(const CommRecord &r) {
    std::lock_guard<std::mutex> lock(mu_);
    CommTotals &t = totals_[static_cast<int>(r.op)];
    ++t.count;
    t.bytes += r.bytes;
    t.seconds += r.seconds;
  }
  CommTotals Totals(CommOp op) const {
    std::lock_guard<std::mutex> lock(mu_);
    return totals_[static_cast<int>(op)];
  }

 private:
  mutable std::mutex mu_;
  std::array<CommTotals, kOps> totals_{};
};

}  // namespace dst
