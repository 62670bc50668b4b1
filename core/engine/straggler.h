// Straggler detection (communication.slow_node_tolerance): every `every`
// steps (steps_per_print) each rank posts its median compute time per step over
// the window (the layers' own time: gathers and reductions excluded; the median
// so that one step preempted by the OS does not make a straggler) with its
// host name to the rendezvous store and reads everyone's. A rank slower than
// the median by more than the tolerance is a straggler: every rank knows the
// verdict (its metric dstrain_straggler, the dashboard's rank table), and
// rank 0 logs a warning naming each straggler's rank and host.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/store.h"
#include "core/common/status.h"

namespace dst {

struct StragglerReport {
  int64_t rank = 0;
  std::string host;
  double compute_seconds = 0;  // median per step over the window
  double slower_by = 0;        // compute / median - 1
};

struct StragglerVerdict {
  bool checked = false;  // this step closed a window
  double median_seconds = 0;
  std::vector<StragglerReport> slow;  // beyond the tolerance, slowest first
  bool this_rank_slow = false;
};

// The ranks slower than the median by more than `tolerance` (pure: tests).
StragglerVerdict JudgeStragglers(const std::vector<StragglerReport> &ranks, double tolerance,
                                 int64_t my_rank);

class StragglerDetector {
 public:
  StragglerDetector(Store *store, int64_t rank, int64_t world, double tolerance, int64_t every,
                    std::chrono::milliseconds timeout);
  // A step's compute seconds; at the end of a window, the verdict.
  Result<StragglerVerdict> OnStep(double compute_seconds);
  const StragglerVerdict &last() const { return last_; }

 private:
  Store *store_;
  int64_t rank_, world_;
  double tolerance_;
  int64_t every_;
  std::chrono::milliseconds timeout_;
  std::string host_;
  int64_t steps_ = 0, window_ = 0;
  std::vector<double> window_steps_;  // this window's step times so far
  StragglerVerdict last_;
};

}  // namespace dst
