#include "core/optim/zero_one_policy.h"

#include <algorithm>

namespace dst {

ZeroOneStep ZeroOnePolicy::Next() const {
  const int64_t t = steps_ + 1;
  if (Frozen(t)) return t % local_interval_ == 0 ? ZeroOneStep::kSync : ZeroOneStep::kLocal;
  return t % var_interval_ == 0 ? ZeroOneStep::kVariance : ZeroOneStep::kCompressed;
}

void ZeroOnePolicy::Advance() {
  const int64_t t = ++steps_;
  if (Frozen(t)) {
    if (++local_counter_ == config_.local_step_scaler) {
      local_counter_ = 0;
      local_interval_ = std::min(config_.local_step_clipper, local_interval_ * 2);
    }
    return;
  }
  if (t % var_interval_ == 0 && ++var_counter_ == config_.var_update_scaler) {
    var_counter_ = 0;
    var_interval_ *= 2;
  }
}

void ZeroOnePolicy::Reset(int64_t steps) {
  steps_ = 0;
  var_interval_ = 1, var_counter_ = 0;
  local_interval_ = 1, local_counter_ = 0;
  while (steps_ < steps) Advance();
}

}  // namespace dst
