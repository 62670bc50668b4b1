// Loss scaling for fp16 training, with DeepSpeed's semantics and keys
// (fp16.loss_scale, initial_scale_power, loss_scale_window, hysteresis,
// consecutive_hysteresis, min_loss_scale). The loss is multiplied by the
// scale before backward so small gradients survive fp16; a step whose
// gradients overflow (inf/nan on any rank) is skipped on every rank and, with
// a dynamic scale, lowers it once `hysteresis` overflows have been absorbed;
// after `loss_scale_window` clean steps since the last overflow it doubles.
// A static scale (loss_scale > 0) never changes; overflowing steps are still
// skipped. bf16 and fp32 use scale 1 and never overflow-skip.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/common/status.h"
#include "core/config/config.h"

namespace dst {

struct LossScalerState {
  double scale = 1;
  int64_t iteration = 0;       // updates seen (DeepSpeed's cur_iter)
  int64_t last_overflow = -1;  // iteration of the last overflow
  int hysteresis_left = 1;     // overflows still absorbed before the scale drops
};

class LossScaler {
 public:
  // A scaler for `fp16` (enabled); a disabled config gives the identity
  // scaler (scale 1, Update does nothing).
  explicit LossScaler(const Fp16Config &fp16);

  double scale() const { return state_.scale; }
  bool dynamic() const { return dynamic_; }
  bool enabled() const { return enabled_; }
  const LossScalerState &state() const { return state_; }

  // After a step's overflow check. With a dynamic scale: an overflow at the
  // minimum scale is a kNumeric error that says what to change (the scale
  // cannot go lower; the step is skipped either way).
  Status Update(bool overflow);

  nlohmann::json ToJson() const;
  // Restores a state saved by ToJson (a checkpoint); errors name the field.
  Status FromJson(const nlohmann::json &j);

 private:
  bool enabled_ = false, dynamic_ = false, consecutive_hysteresis_ = false;
  double factor_ = 2, min_scale_ = 1;
  int64_t window_ = 1000;
  int hysteresis_ = 2;
  LossScalerState state_;
};

}  // namespace dst
