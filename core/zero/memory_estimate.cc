#include "core/zero/memory_estimate.h"

#include "core/zero/shard_layout.h"

namespace dst {

int64_t OptimizerStateBytesPerParameter(const OptimizerConfig &optimizer, DType precision) {
  const int64_t master = precision == DType::kFloat32 ? 0 : 4;
  if (optimizer.type != OptimizerType::kSGD) return master + 8;
  return master + (optimizer.momentum != 0 ? 4 : 0);
}

ModelStateBytes EstimateModelState(int64_t num_parameters, int64_t dp_size, int stage,
                                   const OptimizerConfig &optimizer,
                                   int64_t stage3_persistent_elements, DType precision) {
  const ShardLayout layout(num_parameters, dp_size);
  const int64_t full = layout.padded, shard = layout.shard_size();
  const int64_t k = OptimizerStateBytesPerParameter(optimizer, precision);
  const bool mixed = precision != DType::kFloat32;
  const int64_t width = mixed ? 2 : 4;
  const int64_t persistent = stage3_persistent_elements;
  ModelStateBytes b;
  b.parameters = width * (stage >= 3 ? shard + persistent : full);
  b.gradients = width * (stage >= 2 ? shard : full);
  b.optimizer_state = k * (stage >= 1 ? shard : full);
  return b;
}

}  // namespace dst
