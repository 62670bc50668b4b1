#include "core/zero/partition_policy.h"

#include "core/zero/onebit_allreduce.h"
#include "core/zero/param_types.h"
#include "core/zero/partition_plan.h"

namespace dst {

PartitionPolicy PartitionPolicyFor(const ModelSpec &spec, const std::vector<ParamDecl> &decls,
                                   const Config &config) {
  PartitionPolicy policy;
  policy.whole_by_type = WholeByParamType(spec, decls, config.zero.zero_allowed_param_types,
                                          config.zero.zero_force_param_types);
  policy.fp32 = Fp32ByParamType(spec, decls, config.fp32_modules());
  for (size_t k = 0; k < decls.size(); ++k)
    policy.fp32_elements += policy.fp32[k] ? decls[k].numel : 0;
  policy.persistence_threshold = config.zero.stage3_param_persistence_threshold;
  policy.stage3_persistent_elements =
      PersistentElements(decls, policy.persistence_threshold, policy.whole_by_type, policy.fp32);
  return policy;
}

int64_t OneBitResidualBytes(const Config &config, const std::vector<ParamDecl> &decls) {
  const OptimizerType type = config.optimizer.type;
  const bool onebit = type == OptimizerType::kOneBitAdam || type == OptimizerType::kZeroOneAdam ||
                      type == OptimizerType::kOneBitLamb;
  if (!onebit || config.dp_size < 2) return 0;
  std::vector<int64_t> numels;
  int64_t total = 0;
  for (const ParamDecl &d : decls) {
    numels.push_back(d.numel);
    total += d.numel;
  }
  if (type == OptimizerType::kOneBitLamb) numels = {total};  // exchanged as one
  return OneBitAllReduce::MemoryOf(numels, config.dp_size).residual_bytes;
}

}  // namespace dst
