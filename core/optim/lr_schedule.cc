#include "core/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace dst {

namespace {

constexpr double kPi = 3.14159265358979323846;

// DeepSpeed clamps the warm-up length to at least 2 (log(1) would divide by 0).
int64_t WarmupSteps(const SchedulerConfig &s) {
  return std::max<int64_t>(2, s.warmup_num_steps);
}

// Fraction of warm-up done at `iteration` (< warm-up steps): log or linear.
double WarmupGamma(const SchedulerConfig &s, int64_t iteration) {
  const double steps = double(WarmupSteps(s));
  if (s.warmup_type == WarmupType::kLog) return std::log(double(iteration) + 1.0) / std::log(steps);
  return double(iteration) / steps;
}

double WarmupLr(const SchedulerConfig &s, int64_t iteration) {
  const double gamma = iteration < WarmupSteps(s) ? WarmupGamma(s, iteration) : 1.0;
  return s.warmup_min_lr + (s.warmup_max_lr - s.warmup_min_lr) * gamma;
}

double WarmupDecayLr(const SchedulerConfig &s, int64_t iteration) {
  const int64_t warmup = WarmupSteps(s);
  double gamma;
  if (iteration < warmup) {
    gamma = WarmupGamma(s, iteration);
  } else {
    gamma = std::max(0.0, double(s.total_num_steps - iteration) /
                              std::max(1.0, double(s.total_num_steps - warmup)));
  }
  return s.warmup_min_lr + (s.warmup_max_lr - s.warmup_min_lr) * gamma;
}

double WarmupCosineRatio(const SchedulerConfig &s, int64_t iteration) {
  const int64_t warmup = WarmupSteps(s);
  if (iteration < warmup) {
    const double ratio = WarmupGamma(s, iteration);
    return s.warmup_min_ratio + ratio * (1.0 - s.warmup_min_ratio);
  }
  const double done = double(iteration - warmup + 1);
  const double total = double(s.total_num_steps - warmup);
  const double cosine = (1.0 + std::cos(kPi * done / total)) / 2.0;
  return std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * cosine);
}

}  // namespace

double LearningRateAt(const SchedulerConfig &schedule, double base_lr, int64_t iteration) {
  switch (schedule.type) {
    case SchedulerType::kNone:
      return base_lr;
    case SchedulerType::kWarmupLR:
      return WarmupLr(schedule, iteration);
    case SchedulerType::kWarmupDecayLR:
      return WarmupDecayLr(schedule, iteration);
    case SchedulerType::kWarmupCosineLR:
      return base_lr * WarmupCosineRatio(schedule, iteration);
  }
  return base_lr;
}

}  // namespace dst
