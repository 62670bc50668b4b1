// What one rank of a (dp, tp, pp) layout holds, computed from the config and
// the model spec without building anything: model state (the ZeRO formula
// over the rank's tensor slices), the step-wide gradient buffer of ZeRO 2 on
// a pipeline stage, and activations (its activation store at the schedule's
// peak of micro-batches in flight, and its work buffers). The engine sizes
// its activation store from the same options, so `dstrain estimate` prints
// what a run measures (tested to the byte). Communication staging buffers are
// not counted (they depend on bucket sizes, not on the layout).
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/status.h"
#include "core/config/config.h"
#include "core/model/activation_store.h"
#include "core/layers/layer.h"
#include "core/model/model_spec.h"
#include "core/pipeline/stage_plan.h"

namespace dst {

// The largest micro-batch a rank's buffers are sized for.
ActivationLimits ActivationLimitsFor(const Config &config, const ModelSpec &spec, int threads);
// How pipeline rank `pp_rank` keeps activations (plan: null without a pipeline).
ActivationOptions ActivationOptionsFor(const Config &config, const StagePlan *plan,
                                       int64_t pp_rank);

struct RankMemory {
  int64_t parameters = 0;           // elements this rank holds (its stage's tp slices)
  int64_t model_state_bytes = 0;    // parameters + gradients + optimizer state, at rest
  int64_t step_gradient_bytes = 0;  // ZeRO 2 on a pipeline stage, during a step
  int64_t activation_bytes = 0;     // activation store + work buffers
  int64_t micro_batches_in_flight = 1;
  int64_t total() const { return model_state_bytes + step_gradient_bytes + activation_bytes; }
};

// One entry per pipeline rank (one without a pipeline); every tp and dp rank
// of a stage holds the same. `threads`: the rank's thread count (its
// attention scratch grows with it).
Result<std::vector<RankMemory>> LayoutMemory(const ModelSpec &spec, const Config &config,
                                             int threads);

// A (dp, tp, pp) for world_size ranks, the config's global batch and
// micro-batch kept (gradient accumulation = global / (micro x dp)).
struct LayoutCandidate {
  int64_t dp = 1, tp = 1, pp = 1;
  Status feasible;         // why the layout cannot run, if it cannot
  int64_t peak_bytes = 0;  // the largest RankMemory::total over its stages
  std::vector<RankMemory> ranks;
};

// Every factorisation dp x tp x pp = world_size, in the order dp descending,
// then tp ascending (the seeds' advice: as much data parallelism as fits,
// then the least model parallelism).
std::vector<LayoutCandidate> EnumerateLayouts(const ModelSpec &spec, const Config &config,
                                              int64_t world_size, int threads);

// The layout to suggest for `budget_bytes` per rank: the first feasible one
// (in EnumerateLayouts' order) whose peak fits; -1 when none does.
int64_t SuggestLayout(const std::vector<LayoutCandidate> &layouts, int64_t budget_bytes);

}  // namespace dst
