// StagePlan: which layers each pipeline rank holds, and the schedule it runs
// — computed identically on every rank from the model spec and the config
// (nothing is exchanged), and checked before anything runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/status.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/pipeline/pipeline_schedule.h"

namespace dst {

struct StagePlan {
  int64_t stages = 1, virtual_stages = 1;
  std::vector<size_t> bounds;  // [stages * virtual_stages + 1] over the whole model's layers
  PipeScheduleKind schedule = PipeScheduleKind::kOneForwardOneBackward;
  // On a device the stages exchange over a stream-ordered transport (NCCL):
  // Actions regroups the programs' sends and receives so that they cannot
  // hang or cross there (GroupForStreamOrder), evaluation's too.
  bool stream_ordered = false;
  std::vector<LayerSummary> layers;  // the whole model's, for reports

  // Rank r's model chunks: chunk c is virtual stage c * stages + r.
  std::vector<LayerRange> ChunksOf(int64_t rank) const;
  // The rank holding layer g of the whole model.
  int64_t RankOfLayer(size_t g) const;
  // The most (chunk, micro-batch) pairs rank r holds activations for under
  // the plan's schedule with m micro-batches.
  int64_t PeakInFlight(int64_t rank, int64_t micro_batches) const;
  // Every rank's actions for m micro-batches, checked (sends and receives
  // pair up, nothing can wait forever, and when stream_ordered nothing hangs
  // or crosses in program order either); an error names what is wrong.
  Result<std::vector<std::vector<PipeAction>>> Actions(int64_t micro_batches) const;
};

// Partitions `spec` for config.pp_size stages x config.pipeline.virtual_stages.
Result<StagePlan> PlanStages(const ModelSpec &spec, const Config &config);

}  // namespace dst
