// DeepSpeed's learning-rate schedules (deepspeed/runtime/lr_schedules.py),
// as pure functions of the iteration: the LR that optimizer step `iteration`
// (0-based) uses. DeepSpeed steps the scheduler once at construction and once
// after every optimizer step, so step k runs at f(k).
#pragma once

#include <cstdint>

#include "core/config/config.h"

namespace dst {

// base_lr is the optimizer's lr (used by WarmupCosineLR, which scales it, and
// by kNone, which returns it).
double LearningRateAt(const SchedulerConfig &schedule, double base_lr, int64_t iteration);

}  // namespace dst
