#include "core/engine/memory_report.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/engine/layout_memory.h"
#include "core/model/model.h"
#include "core/pipeline/stage_plan.h"
#include "core/runtime/threads.h"
#include "core/zero/memory_estimate.h"
#include "core/zero/partition_policy.h"

namespace dst {

namespace {

// The partition each pipeline rank gets and what it holds: its layers, their
// parameters, its model-state bytes at the configured ZeRO stage (the stage's
// parameters in place of the model's; the last stage's own copy of a tied
// wte counted there), the activations it saves with the schedule's peak of
// micro-batches in flight, and its whole activation memory (LayoutMemory).
Result<nlohmann::ordered_json> PipelineEstimate(const ModelSpec &spec, const Config &config,
                                                const std::vector<RankMemory> &memory) {
  Result<StagePlan> plan = PlanStages(spec, config);
  if (!plan.ok()) return plan.status();
  const StagePlan &p = plan.value();
  const ActivationLimits limits = ActivationLimitsFor(config, spec, 1);
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (int64_t r = 0; r < p.stages; ++r) {
    const std::vector<LayerRange> chunks = p.ChunksOf(r);
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const LayerRange &c : chunks) {
      nlohmann::ordered_json kinds = nlohmann::ordered_json::array();
      for (size_t g = c.begin; g < c.end; ++g) kinds.push_back(p.layers[g].kind);
      layers.push_back({{"first", c.begin}, {"last", c.end - 1}, {"kinds", kinds}});
    }
    const RankMemory &m = memory[size_t(r)];
    // Zero bubble: the split backward's deferred gradients are held per micro-batch too.
    const bool split = p.schedule == PipeScheduleKind::kZeroBubbleH1;
    const int64_t saved = SavedActivationElements(spec, chunks, limits, split, config.tp_size,
                                                  config.sequence_parallel);
    ranks.push_back(
        {{"rank", r},
         {"chunks", layers},
         {"parameters", m.parameters},
         {"model_state_bytes", m.model_state_bytes},
         {"step_gradient_bytes", m.step_gradient_bytes},
         {"micro_batches_in_flight", m.micro_batches_in_flight},
         {"saved_activation_bytes_per_micro_batch", saved * int64_t(sizeof(float))},
         {"saved_activation_bytes", saved * int64_t(sizeof(float)) * m.micro_batches_in_flight},
         {"activation_bytes", m.activation_bytes}});
  }
  return nlohmann::ordered_json{{"stages", p.stages},
                                {"virtual_stages", p.virtual_stages},
                                {"schedule", PipeScheduleName(p.schedule)},
                                {"partition_method", config.pipeline.partition_method},
                                {"micro_batches", config.gradient_accumulation_steps},
                                {"ranks", ranks}};
}

nlohmann::ordered_json MemoryJson(const RankMemory &m) {
  return {{"parameters", m.parameters},
          {"model_state_bytes", m.model_state_bytes},
          {"step_gradient_bytes", m.step_gradient_bytes},
          {"activation_bytes", m.activation_bytes},
          {"micro_batches_in_flight", m.micro_batches_in_flight},
          {"total_bytes", m.total()}};
}

// Every (dp, tp, pp) for the world size, with each one's per-rank peak or
// the reason it cannot run.
nlohmann::ordered_json LayoutsJson(const std::vector<LayoutCandidate> &layouts) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const LayoutCandidate &c : layouts) {
    nlohmann::ordered_json j = {{"dp", c.dp}, {"tp", c.tp}, {"pp", c.pp}};
    if (c.feasible.ok()) {
      j["peak_bytes"] = c.peak_bytes;
      nlohmann::ordered_json stages = nlohmann::ordered_json::array();
      for (const RankMemory &m : c.ranks) stages.push_back(MemoryJson(m));
      j["stages"] = stages;
    } else {
      j["error"] = c.feasible.message();
    }
    out.push_back(j);
  }
  return out;
}

}  // namespace

Result<std::string> MemoryReportJson(const std::string &config_text, const std::string &model_text,
                                     int64_t world_size, int64_t total_steps) {
  if (world_size < 1)
    return InvalidArgument("world_size is " + std::to_string(world_size) + "; it must be >= 1");
  ConfigContext context;
  context.world_size = world_size;
  context.total_steps = total_steps > 0 ? total_steps : 1;
  Result<Config> parsed_config = ParseConfig(config_text, context);
  if (!parsed_config.ok()) return parsed_config.status();
  Result<ModelSpec> parsed_spec = ParseModelSpec(model_text);
  if (!parsed_spec.ok()) return parsed_spec.status();
  const Config &config = parsed_config.value();
  const ModelSpec &spec = parsed_spec.value();

  // Per rank: a tensor-parallel rank holds its slices (all the same size).
  const int64_t tp = config.tp_size;
  if (Result<std::vector<TpRole>> roles = PlanTensorParallel(spec, tp); !roles.ok())
    return roles.status();
  const std::vector<ParamDecl> decls = DeclarePartParameters(spec, {}, tp);
  int64_t psi = 0;
  for (const ParamDecl &d : decls) psi += d.numel;
  const int64_t dp = config.dp_size;
  // 16-bit training with override_modules: the listed types' tensors are
  // fp32 and whole on every rank (and so never stage-3 persistent); stage 3
  // keeps tensors of at most the threshold whole on every rank.
  const PartitionPolicy policy = PartitionPolicyFor(spec, decls, config);
  const int64_t fp32_elements = policy.fp32_elements;
  const int64_t persistent = policy.stage3_persistent_elements;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  const DType precision = config.precision();
  for (int stage = 0; stage <= 3; ++stage) {
    const int64_t stage_persistent = stage == 3 ? persistent : 0;
    ModelStateBytes b =
        EstimateModelState(psi, dp, stage, SteppedOptimizer(config), stage_persistent, precision);
    b.parameters += 4 * fp32_elements;  // none under fp32 training
    b.gradients += 4 * fp32_elements;
    // On a device the sparse reduce-scatter (stages 2, 3) is not built.
    const bool compressed_on_device =
        config.gradient_compression.enabled && config.runtime.device == "cuda";
    b.optimizer_state += CompressionStateBytes(config.gradient_compression, psi, dp, stage);
    // The 1-bit optimizers (stage 0 only): their error feedback.
    const OptimizerType type = config.optimizer.type;
    const bool onebit = type == OptimizerType::kOneBitAdam || type == OptimizerType::kZeroOneAdam ||
                        type == OptimizerType::kOneBitLamb;
    b.optimizer_state += OneBitResidualBytes(config, decls);
    // gradient_compression's update exchange keeps the whole state: stage 0 only.
    const bool updates =
        config.gradient_compression.enabled && config.gradient_compression.target == "update";
    stages.push_back({{"stage", stage},
                      {"parameters_bytes", b.parameters},
                      {"gradients_bytes", b.gradients},
                      {"optimizer_state_bytes", b.optimizer_state},
                      {"total_bytes", b.total()},
                      {"persistent_parameters", stage_persistent},
                      {"fp32_parameters", fp32_elements},
                      {"supported", (!compressed_on_device || stage <= 1) &&
                                        (!onebit || stage == 0) && (!updates || stage == 0)}});
  }
  nlohmann::ordered_json out = {
      {"num_parameters", CountParameters(spec)},
      {"parameters_per_rank", psi},
      {"world_size", world_size},
      {"dp_size", dp},
      {"tp_size", tp},
      {"pp_size", config.pp_size},
      {"precision", DTypeName(precision)},
      {"optimizer_state_bytes_per_parameter",
       OptimizerStateBytesPerParameter(SteppedOptimizer(config), precision)},
      {"configured_stage", config.zero.stage},
      {"stages", stages}};
  // This layout's ranks in full (activations included), then every layout
  // of the world size for `dstrain estimate --memory-per-rank`.
  const int threads = ResolveNumThreads(config.runtime.num_threads);
  Result<std::vector<RankMemory>> memory = LayoutMemory(spec, config, threads);
  if (!memory.ok()) return memory.status();
  RankMemory peak = memory.value().front();
  for (const RankMemory &m : memory.value())
    if (m.total() > peak.total()) peak = m;
  out["threads"] = threads;
  out["per_rank"] = MemoryJson(peak);
  if (config.pp_size > 1) {
    Result<nlohmann::ordered_json> pipeline = PipelineEstimate(spec, config, memory.value());
    if (!pipeline.ok()) return pipeline.status();
    out["pipeline"] = std::move(pipeline).value();
  }
  out["layouts"] = LayoutsJson(EnumerateLayouts(spec, config, world_size, threads));
  return out.dump();
}

}  // namespace dst
