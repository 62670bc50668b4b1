#include "core/precision/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace dst {

LossScaler::LossScaler(const Fp16Config &fp16)
    : enabled_(fp16.enabled),
      dynamic_(fp16.enabled && fp16.loss_scale == 0),
      consecutive_hysteresis_(fp16.consecutive_hysteresis),
      min_scale_(fp16.min_loss_scale),
      window_(fp16.loss_scale_window),
      hysteresis_(fp16.hysteresis) {
  if (!enabled_) return;
  state_.scale = dynamic_ ? std::ldexp(1.0, fp16.initial_scale_power) : fp16.loss_scale;
  state_.hysteresis_left = hysteresis_;
}

Status LossScaler::Update(bool overflow) {
  if (!enabled_ || !dynamic_) {
    ++state_.iteration;
    return Status::Ok();
  }
  Status status;
  if (overflow) {
    if (hysteresis_ == 1 || state_.hysteresis_left == 1) {
      if (state_.scale <= min_scale_) {
        status = Status(Code::kNumeric,
                        "fp16: the gradients overflow even at the minimum loss scale " +
                            std::to_string(min_scale_) +
                            " (fp16.min_loss_scale); the step was skipped. The model's values "
                            "exceed fp16's range: lower the learning rate, set "
                            "gradient_clipping, lower fp16.min_loss_scale, or train in bf16");
      }
      state_.scale = std::max(state_.scale / factor_, min_scale_);
    } else {
      --state_.hysteresis_left;
    }
    state_.last_overflow = state_.iteration;
  } else {
    if (consecutive_hysteresis_) state_.hysteresis_left = hysteresis_;
    if ((state_.iteration - state_.last_overflow) % window_ == 0) {
      if (!consecutive_hysteresis_) state_.hysteresis_left = hysteresis_;
      state_.scale *= factor_;
    }
  }
  ++state_.iteration;
  return status;
}

nlohmann::json LossScaler::ToJson() const {
  return {{"dynamic", dynamic_},
          {"scale", state_.scale},
          {"iteration", state_.iteration},
          {"last_overflow", state_.last_overflow},
          {"hysteresis_left", state_.hysteresis_left}};
}

Status LossScaler::FromJson(const nlohmann::json &j) {
  if (!enabled_) return Status::Ok();  // fp32/bf16 keep no scale
  if (!j.is_object())                  // saved without fp16: start from the configured scale
    return Status::Ok();
  try {
    LossScalerState s;
    s.scale = j.at("scale").get<double>();
    s.iteration = j.at("iteration").get<int64_t>();
    s.last_overflow = j.at("last_overflow").get<int64_t>();
    s.hysteresis_left = j.at("hysteresis_left").get<int>();
    if (!(s.scale > 0) || !std::isfinite(s.scale) || s.hysteresis_left < 1)
      return CheckpointError("loss_scaler in meta.json holds an invalid state " + j.dump());
    if (dynamic_) state_ = s;  // a static scale stays as configured
  } catch (const nlohmann::json::exception &e) {
    return CheckpointError(std::string("loss_scaler in meta.json is malformed (") + e.what() + ")");
  }
  return Status::Ok();
}

}  // namespace dst
