#include "core/engine/layout_memory.h"

#include <algorithm>
#include <optional>

#include "core/device/cuda_kernels.h"
#include "core/kernels/cpu/gemm.h"
#include "core/model/family.h"
#include "core/model/model.h"
#include "core/model/tp_plan.h"
#include "core/zero/memory_estimate.h"
#include "core/zero/param_partition.h"
#include "core/zero/partition_plan.h"
#include "core/zero/partition_policy.h"

namespace dst {

ActivationLimits ActivationLimitsFor(const Config &config, const ModelSpec &spec, int threads) {
  ActivationLimits limits;
  limits.max_B = config.train_micro_batch_size_per_gpu;
  limits.max_T = spec.IsLanguageModel() ? spec.lm.n_ctx : 1;
  limits.max_threads = threads;
  // On a GPU the fused attention saves no probabilities where it takes the
  // shape and the GEMM path is not chosen (the CUDA plugin's rules; the
  // engine asks its kernels instead).
  if (config.runtime.device == "cuda" && spec.IsLanguageModel()) {
    const AttentionShape largest = AttentionShapeOf(FamilyOf(spec).block.attention, config.tp_size,
                                                    0, limits.max_B, limits.max_T);
    limits.attention_probabilities =
        CudaAttentionKeepsProbabilities(largest, CudaGemmAttentionFor(largest));
  }
  return limits;
}

ActivationOptions ActivationOptionsFor(const Config &config, const StagePlan *plan,
                                       int64_t pp_rank) {
  ActivationOptions activations;
  if (config.precision() != DType::kFloat32)
    activations.half = config.precision() == DType::kFloat16 ? Half::kFp16 : Half::kBf16;
  activations.fp32_modules = ModuleSetOf(config.fp32_modules());
  activations.recompute = config.recompute_activations();
  activations.recompute_interval = std::max<int64_t>(1, config.recompute_interval());
  activations.selective = config.selective_recompute();
  // bf16 on this CPU's bf16 GEMMs, which keep their operands' bf16 copies
  // (a GPU's kernels do not, nor does its stand-in, which mirrors one).
  activations.bf16_operands = config.precision() == DType::kBFloat16 &&
                              config.runtime.device != "cuda" && cpu::Bf16Compute().enabled;
  if (plan) {
    activations.slots = plan->PeakInFlight(pp_rank, config.gradient_accumulation_steps);
    activations.split_backward = plan->schedule == PipeScheduleKind::kZeroBubbleH1;
  }
  return activations;
}

Result<std::vector<RankMemory>> LayoutMemory(const ModelSpec &spec, const Config &config,
                                             int threads) {
  DST_RETURN_IF_ERROR(PlanTensorParallel(spec, config.tp_size).status());
  std::optional<StagePlan> plan;
  if (config.pp_size > 1) {
    Result<StagePlan> planned = PlanStages(spec, config);
    if (!planned.ok()) return planned.status();
    plan = std::move(planned).value();
  }
  const ActivationLimits limits = ActivationLimitsFor(config, spec, threads);
  std::vector<RankMemory> out;
  for (int64_t r = 0; r < config.pp_size; ++r) {
    const std::vector<LayerRange> chunks = plan ? plan->ChunksOf(r) : std::vector<LayerRange>{};
    std::vector<LayerParamUse> uses;
    const std::vector<ParamDecl> decls = DeclarePartParameters(spec, chunks, config.tp_size, &uses);
    RankMemory m;
    for (const ParamDecl &d : decls) m.parameters += d.numel;
    const PartitionPolicy policy = PartitionPolicyFor(spec, decls, config);
    const int64_t persistent = config.zero.stage == 3 ? policy.stage3_persistent_elements : 0;
    int64_t share = 0;  // offload_param nvme: the largest share a swap window holds
    if (config.zero.stage == 3 && config.zero.offload_param_device == "nvme")
      share = LargestSwappedShare(BuildPartitionPlan(decls, uses, policy.persistence_threshold,
                                                     policy.whole_by_type, policy.fp32),
                                  ShardLayout(m.parameters, config.dp_size),
                                  config.zero.offload_param_max_in_cpu);
    m.model_state_bytes =
        EstimateRankModelState(m.parameters, config, persistent, share, policy.fp32_elements)
            .total();
    m.model_state_bytes += OneBitResidualBytes(config, decls);
    // ZeRO 2 with a pipeline: the step's gradients accumulate in a step-wide
    // fp32 buffer (freed once reduced), on top of the model state at rest.
    if (config.zero.stage == 2 && plan) m.step_gradient_bytes = m.parameters * 4;
    const ActivationOptions activations = ActivationOptionsFor(config, plan ? &*plan : nullptr, r);
    m.micro_batches_in_flight = activations.slots;
    m.activation_bytes = ActivationBytes(spec, chunks, limits, activations, config.tp_size,
                                         config.sequence_parallel);
    out.push_back(m);
  }
  return out;
}

namespace {

// `config` at another layout, the global batch and micro-batch kept.
Result<Config> AtLayout(Config config, int64_t dp, int64_t tp, int64_t pp) {
  const int64_t global = config.train_batch_size, micro = config.train_micro_batch_size_per_gpu;
  if (global % (micro * dp) != 0)
    return InvalidArgument("the global batch " + std::to_string(global) +
                           " is not a multiple of micro-batch " + std::to_string(micro) + " x dp " +
                           std::to_string(dp));
  config.dp_size = dp;
  config.tp_size = tp;
  config.pp_size = pp;
  config.gradient_accumulation_steps = global / (micro * dp);
  if (pp == 1) {  // no pipeline: its schedule settings do not apply
    config.pipeline.virtual_stages = 1;
    config.pipeline.schedule = "1f1b";
  }
  return config;
}

}  // namespace

std::vector<LayoutCandidate> EnumerateLayouts(const ModelSpec &spec, const Config &config,
                                              int64_t world_size, int threads) {
  std::vector<LayoutCandidate> out;
  for (int64_t dp = world_size; dp >= 1; --dp) {
    if (world_size % dp != 0) continue;
    const int64_t model_parallel = world_size / dp;
    for (int64_t tp = 1; tp <= model_parallel; ++tp) {
      if (model_parallel % tp != 0) continue;
      LayoutCandidate c{dp, tp, model_parallel / tp, Status::Ok(), 0, {}};
      Result<Config> at = AtLayout(config, c.dp, c.tp, c.pp);
      Result<std::vector<RankMemory>> ranks =
          at.ok() ? LayoutMemory(spec, at.value(), threads) : at.status();
      if (ranks.ok()) {
        c.ranks = std::move(ranks).value();
        for (const RankMemory &m : c.ranks) c.peak_bytes = std::max(c.peak_bytes, m.total());
      } else {
        c.feasible = ranks.status();
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

int64_t SuggestLayout(const std::vector<LayoutCandidate> &layouts, int64_t budget_bytes) {
  for (size_t i = 0; i < layouts.size(); ++i)
    if (layouts[i].feasible.ok() && layouts[i].peak_bytes <= budget_bytes) return int64_t(i);
  return -1;
}

}  // namespace dst
