#include "core/zero/memory_estimate.h"

#include "core/zero/shard_layout.h"

namespace dst {

int64_t OptimizerStateBytesPerParameter(const OptimizerConfig &optimizer) {
  if (optimizer.type != OptimizerType::kSGD) return 8;
  return optimizer.momentum != 0 ? 4 : 0;
}

ModelStateBytes EstimateModelState(int64_t num_parameters, int64_t dp_size, int stage,
                                   const OptimizerConfig &optimizer,
                                   int64_t stage3_persistent_elements) {
  const ShardLayout layout(num_parameters, dp_size);
  const int64_t full = layout.padded, shard = layout.shard_size();
  const int64_t k = OptimizerStateBytesPerParameter(optimizer);
  ModelStateBytes b;
  b.parameters = 4 * (stage >= 3 ? shard + stage3_persistent_elements : full);
  b.gradients = 4 * (stage >= 2 ? shard : full);
  b.optimizer_state = k * (stage >= 1 ? shard : full);
  return b;
}

}  // namespace dst
