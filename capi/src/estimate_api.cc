// dst_estimate_memory_json: per-rank model-state memory for each ZeRO stage.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capi/src/capi_util.h"
#include "capi/src/versioned_struct.h"
#include "core/config/config.h"
#include "core/config/config_file.h"
#include "core/engine/layout_memory.h"
#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/pipeline/stage_plan.h"
#include "core/runtime/threads.h"
#include "core/zero/memory_estimate.h"
#include "core/zero/onebit_allreduce.h"
#include "core/zero/param_types.h"
#include "core/zero/partition_plan.h"
#include "core/zero/shard_layout.h"

namespace {
thread_local std::string g_estimate_json;

dst::Result<std::string> ReadSource(const char *text, const char *path, const char *what) {
  if ((text == nullptr) == (path == nullptr))
    return dst::InvalidArgument(std::string("dst_estimate_memory_json: pass exactly one of the ") +
                                what + " JSON string and the " + what + " path");
  if (text) return std::string(text);
  return dst::ReadConfigFile(path, what);
}
}  // namespace

namespace {

// The partition each pipeline rank gets and what it holds: its layers, their
// parameters, its model-state bytes at the configured ZeRO stage (the stage's
// parameters in place of the model's; the last stage's own copy of a tied
// wte counted there), the activations it saves with the schedule's peak of
// micro-batches in flight, and its whole activation memory (LayoutMemory).
dst::Result<nlohmann::ordered_json> PipelineEstimate(const dst::ModelSpec &spec,
                                                     const dst::Config &config,
                                                     const std::vector<dst::RankMemory> &memory) {
  dst::Result<dst::StagePlan> plan = dst::PlanStages(spec, config);
  if (!plan.ok()) return plan.status();
  const dst::StagePlan &p = plan.value();
  const dst::ActivationLimits limits = dst::ActivationLimitsFor(config, spec, 1);
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (int64_t r = 0; r < p.stages; ++r) {
    const std::vector<dst::LayerRange> chunks = p.ChunksOf(r);
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const dst::LayerRange &c : chunks) {
      nlohmann::ordered_json kinds = nlohmann::ordered_json::array();
      for (size_t g = c.begin; g < c.end; ++g) kinds.push_back(p.layers[g].kind);
      layers.push_back({{"first", c.begin}, {"last", c.end - 1}, {"kinds", kinds}});
    }
    const dst::RankMemory &m = memory[size_t(r)];
    // Zero bubble: the split backward's deferred gradients are held per micro-batch too.
    const bool split = p.schedule == dst::PipeScheduleKind::kZeroBubbleH1;
    const int64_t saved = dst::SavedActivationElements(spec, chunks, limits, split, config.tp_size,
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
                                {"schedule", dst::PipeScheduleName(p.schedule)},
                                {"partition_method", config.pipeline.partition_method},
                                {"micro_batches", config.gradient_accumulation_steps},
                                {"ranks", ranks}};
}

nlohmann::ordered_json MemoryJson(const dst::RankMemory &m) {
  return {{"parameters", m.parameters},
          {"model_state_bytes", m.model_state_bytes},
          {"step_gradient_bytes", m.step_gradient_bytes},
          {"activation_bytes", m.activation_bytes},
          {"micro_batches_in_flight", m.micro_batches_in_flight},
          {"total_bytes", m.total()}};
}

// Every (dp, tp, pp) for the world size, with each one's per-rank peak or
// the reason it cannot run.
nlohmann::ordered_json LayoutsJson(const std::vector<dst::LayoutCandidate> &layouts) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const dst::LayoutCandidate &c : layouts) {
    nlohmann::ordered_json j = {{"dp", c.dp}, {"tp", c.tp}, {"pp", c.pp}};
    if (c.feasible.ok()) {
      j["peak_bytes"] = c.peak_bytes;
      nlohmann::ordered_json stages = nlohmann::ordered_json::array();
      for (const dst::RankMemory &m : c.ranks) stages.push_back(MemoryJson(m));
      j["stages"] = stages;
    } else {
      j["error"] = c.feasible.message();
    }
    out.push_back(j);
  }
  return out;
}

}  // namespace

thread_local std::string g_config_file_text;

extern "C" dst_status_t dst_config_file_read(const char *path, const char **out_text) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(path);
  DST_CAPI_REQUIRE_NONNULL(out_text);
  dst::Result<std::string> text = dst::ReadConfigFile(path, "config");
  if (!text.ok()) return dst::capi::FromStatus(text.status());
  g_config_file_text = std::move(text).value();
  *out_text = g_config_file_text.c_str();
  return DST_OK;
  DST_CAPI_END
}

extern "C" dst_status_t dst_estimate_memory_json(const dst_engine_options_t *options,
                                                 int64_t world_size, const char **out_json) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(options);
  DST_CAPI_REQUIRE_NONNULL(out_json);
  dst_engine_options_t known;  // the caller's options as this library knows them
  if (dst_status_t st =
          dst::capi::ReadStruct(options, "dst_estimate_memory_json", "options", &known);
      st != DST_OK)
    return st;
  options = &known;
  if (world_size < 1)
    return dst::capi::Fail(DST_ERR_INVALID_ARGUMENT, "dst_estimate_memory_json: world_size is " +
                                                         std::to_string(world_size) +
                                                         "; it must be >= 1");
  dst::Result<std::string> config_text =
      ReadSource(options->config_json, options->config_path, "config");
  if (!config_text.ok()) return dst::capi::FromStatus(config_text.status());
  dst::Result<std::string> model_text =
      options->model_path != nullptr && options->model_json == nullptr
          ? dst::ModelSpecText("", options->model_path)  // a file, or a Hugging Face directory
          : ReadSource(options->model_json, options->model_path, "model");
  if (!model_text.ok()) return dst::capi::FromStatus(model_text.status());
  dst::ConfigContext context;
  context.world_size = world_size;
  context.total_steps = options->total_steps > 0 ? options->total_steps : 1;
  dst::Result<dst::Config> config = dst::ParseConfig(config_text.value(), context);
  if (!config.ok()) return dst::capi::FromStatus(config.status());
  dst::Result<dst::ModelSpec> spec = dst::ParseModelSpec(model_text.value());
  if (!spec.ok()) return dst::capi::FromStatus(spec.status());

  // Per rank: a tensor-parallel rank holds its slices (all the same size).
  const int64_t tp = config.value().tp_size;
  if (dst::Result<std::vector<dst::TpRole>> roles = dst::PlanTensorParallel(spec.value(), tp);
      !roles.ok())
    return dst::capi::FromStatus(roles.status());
  const std::vector<dst::ParamDecl> decls = dst::DeclarePartParameters(spec.value(), {}, tp);
  int64_t psi = 0;
  for (const dst::ParamDecl &d : decls) psi += d.numel;
  const int64_t dp = config.value().dp_size;
  // 16-bit training with override_modules: the listed types' tensors are
  // fp32 and whole on every rank (and so never stage-3 persistent).
  const std::vector<bool> fp32 =
      dst::Fp32ByParamType(spec.value(), decls, config.value().fp32_modules());
  int64_t fp32_elements = 0;
  for (size_t k = 0; k < decls.size(); ++k) fp32_elements += fp32[k] ? decls[k].numel : 0;
  // Stage 3 keeps tensors of at most this many elements whole on every rank.
  const int64_t persistent = dst::PersistentElements(
      decls, config.value().zero.stage3_param_persistence_threshold,
      dst::WholeByParamType(spec.value(), decls, config.value().zero.zero_allowed_param_types,
                            config.value().zero.zero_force_param_types),
      fp32);
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  const dst::DType precision = config.value().precision();
  for (int stage = 0; stage <= 3; ++stage) {
    const int64_t stage_persistent = stage == 3 ? persistent : 0;
    dst::ModelStateBytes b = dst::EstimateModelState(
        psi, dp, stage, dst::SteppedOptimizer(config.value()), stage_persistent, precision);
    b.parameters += 4 * fp32_elements;  // none under fp32 training
    b.gradients += 4 * fp32_elements;
    // On a device the sparse reduce-scatter (stages 2, 3) is not built.
    const bool compressed_on_device =
        config.value().gradient_compression.enabled && config.value().runtime.device == "cuda";
    b.optimizer_state +=
        dst::CompressionStateBytes(config.value().gradient_compression, psi, dp, stage);
    // The 1-bit optimizers (stage 0 only): the worker and server error
    // feedback of each tensor (1-bit LAMB: of all of them as one).
    const dst::OptimizerType type = config.value().optimizer.type;
    const bool onebit = type == dst::OptimizerType::kOneBitAdam ||
                        type == dst::OptimizerType::kZeroOneAdam ||
                        type == dst::OptimizerType::kOneBitLamb;
    if (onebit && dp > 1) {
      std::vector<int64_t> numels;
      for (const dst::ParamDecl &d : decls) numels.push_back(d.numel);
      if (type == dst::OptimizerType::kOneBitLamb) numels = {psi};
      b.optimizer_state += dst::OneBitAllReduce::MemoryOf(numels, dp).residual_bytes;
    }
    stages.push_back(
        {{"stage", stage},
         {"parameters_bytes", b.parameters},
         {"gradients_bytes", b.gradients},
         {"optimizer_state_bytes", b.optimizer_state},
         {"total_bytes", b.total()},
         {"persistent_parameters", stage_persistent},
         {"fp32_parameters", fp32_elements},
         {"supported", (!compressed_on_device || stage <= 1) && (!onebit || stage == 0)}});
  }
  nlohmann::ordered_json out = {
      {"num_parameters", dst::CountParameters(spec.value())},
      {"parameters_per_rank", psi},
      {"world_size", world_size},
      {"dp_size", dp},
      {"tp_size", tp},
      {"pp_size", config.value().pp_size},
      {"precision", dst::DTypeName(precision)},
      {"optimizer_state_bytes_per_parameter",
       dst::OptimizerStateBytesPerParameter(dst::SteppedOptimizer(config.value()), precision)},
      {"configured_stage", config.value().zero.stage},
      {"stages", stages}};
  // This layout's ranks in full (activations included), then every layout
  // of the world size for `dstrain estimate --memory-per-rank`.
  const int threads = dst::ResolveNumThreads(config.value().runtime.num_threads);
  dst::Result<std::vector<dst::RankMemory>> memory =
      dst::LayoutMemory(spec.value(), config.value(), threads);
  if (!memory.ok()) return dst::capi::FromStatus(memory.status());
  dst::RankMemory peak = memory.value().front();
  for (const dst::RankMemory &m : memory.value())
    if (m.total() > peak.total()) peak = m;
  out["threads"] = threads;
  out["per_rank"] = MemoryJson(peak);
  if (config.value().pp_size > 1) {
    dst::Result<nlohmann::ordered_json> pipeline =
        PipelineEstimate(spec.value(), config.value(), memory.value());
    if (!pipeline.ok()) return dst::capi::FromStatus(pipeline.status());
    out["pipeline"] = std::move(pipeline).value();
  }
  out["layouts"] =
      LayoutsJson(dst::EnumerateLayouts(spec.value(), config.value(), world_size, threads));
  g_estimate_json = out.dump();
  *out_json = g_estimate_json.c_str();
  return DST_OK;
  DST_CAPI_END
}
