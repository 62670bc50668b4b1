#include "core/pipeline/stage_plan.h"

#include <algorithm>

#include "core/pipeline/exchange_order.h"
#include "core/pipeline/partition.h"

namespace dst {

std::vector<LayerRange> StagePlan::ChunksOf(int64_t rank) const {
  std::vector<LayerRange> chunks;
  for (int64_t c = 0; c < virtual_stages; ++c) {
    const size_t vs = size_t(c * stages + rank);
    chunks.push_back({bounds[vs], bounds[vs + 1]});
  }
  return chunks;
}

int64_t StagePlan::RankOfLayer(size_t g) const {
  for (size_t vs = 0; vs + 1 < bounds.size(); ++vs)
    if (g >= bounds[vs] && g < bounds[vs + 1]) return int64_t(vs) % stages;
  return -1;
}

Result<std::vector<std::vector<PipeAction>>> StagePlan::Actions(int64_t micro_batches) const {
  std::vector<std::vector<PipeAction>> programs =
      BuildPipeSchedule(schedule, stages, micro_batches, virtual_stages);
  const std::string what = std::string("pipeline schedule \"") + PipeScheduleName(schedule) +
                           "\" with " + std::to_string(micro_batches) + " micro-batches";
  Result<PipeScheduleCheck> check = CheckPipeSchedule(programs, micro_batches, virtual_stages);
  if (!check.ok()) return Status(check.status()).context(what);
  if (!stream_ordered) return programs;
  Result<std::vector<std::vector<PipeAction>>> grouped =
      GroupForStreamOrder(std::move(programs), virtual_stages);
  if (!grouped.ok()) return Status(grouped.status()).context(what + " on a device");
  std::vector<std::vector<PipeAction>> forward;
  for (const std::vector<PipeAction> &actions : grouped.value())
    forward.push_back(ForwardActions(actions));
  if (Status st = CheckExchanges(forward, virtual_stages); !st.ok())
    return st.context(what + " on a device (evaluation)");
  return grouped;
}

int64_t StagePlan::PeakInFlight(int64_t rank, int64_t micro_batches) const {
  std::vector<std::vector<PipeAction>> programs =
      BuildPipeSchedule(schedule, stages, micro_batches, virtual_stages);
  int64_t in_flight = 0, peak = 0;
  for (const PipeAction &a : programs[size_t(rank)]) {
    if (a.op == PipeOp::kForward) peak = std::max(peak, ++in_flight);
    if (a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight) --in_flight;
  }
  return std::max<int64_t>(peak, 1);
}

Result<StagePlan> PlanStages(const ModelSpec &spec, const Config &config) {
  StagePlan plan;
  plan.stages = config.pp_size;
  plan.virtual_stages = config.pipeline.virtual_stages;
  Result<PipeScheduleKind> kind = ParsePipeSchedule(config.pipeline.schedule);
  if (!kind.ok()) return kind.status();
  plan.schedule = kind.value();
  plan.stream_ordered = config.runtime.device == "cuda";
  const int64_t B = config.train_micro_batch_size_per_gpu;
  const int64_t T = spec.IsLanguageModel() ? spec.lm.n_ctx : 1;
  plan.layers = SummarizeLayers(spec, B, T);
  std::vector<LayerCost> costs;
  for (const LayerSummary &l : plan.layers)
    costs.push_back({l.kind, l.parameters, 3.0 * l.forward_flops});
  Result<std::vector<size_t>> bounds =
      PartitionLayers(costs, plan.stages * plan.virtual_stages, config.pipeline.partition_method);
  if (!bounds.ok()) return bounds.status();
  plan.bounds = std::move(bounds).value();
  return plan;
}

}  // namespace dst
