// 0/1 Adam's schedule (DeepSpeed's ZeroOneAdam, Lu et al. 2022): which steps
// update the variance from all-reduced gradients, which exchange compressed
// gradients instead, and, once the variance is frozen, which steps are
// local and which synchronise the ranks. A function of the step number (and
// the configuration) only, advanced a step at a time, rebuilt on a resume.
//
//   before the freeze (t <= var_freeze_step): step t is a variance step when
//     t is a multiple of the interval (which starts at 1 and doubles after
//     every var_update_scaler variance steps); the others exchange the
//     gradient in 1 bit.
//   after it: every step is local (the momentum from the rank's own
//     gradient); a step that is a multiple of the local interval (starting
//     at 1, doubled after every local_step_scaler steps, at most
//     local_step_clipper) synchronises the ranks.
#pragma once

#include <cstdint>

#include "core/config/config.h"

namespace dst {

enum class ZeroOneStep {
  kVariance,    // all-reduced gradient: Adam with the variance updated
  kCompressed,  // the gradient exchanged in 1 bit: the momentum only
  kLocal,       // frozen: the rank's own step, accumulated
  kSync,        // frozen: the accumulated steps exchanged in 1 bit
};

class ZeroOnePolicy {
 public:
  explicit ZeroOnePolicy(const OptimizerConfig &config) : config_(config) {}
  // What step `steps_done + 1` is; Advance moves past it.
  ZeroOneStep Next() const;
  void Advance();
  // The state after `steps` steps (a resume).
  void Reset(int64_t steps);
  // Whether the next step is the first frozen one (the error feedback then
  // restarts: it measured gradients, it will measure accumulated steps).
  bool NextIsFirstFrozen() const { return steps_ == config_.var_freeze_step; }

 private:
  bool Frozen(int64_t t) const { return t > config_.var_freeze_step; }
  OptimizerConfig config_;
  int64_t steps_ = 0;
  int64_t var_interval_ = 1, var_counter_ = 0;
  int64_t local_interval_ = 1, local_counter_ = 0;
};

}  // namespace dst
