#include "core/zero/memory_estimate.h"

#include <algorithm>

#include "core/offload/param_swap.h"
#include "core/zero/shard_layout.h"
#include "core/zero/sparse_reduce_scatter.h"
#include "core/zero/update_exchange.h"

namespace dst {

int64_t OptimizerStateBytesPerParameter(const OptimizerConfig &optimizer, DType precision) {
  const int64_t master = precision == DType::kFloat32 ? 0 : 4;
  // 0/1 Adam: an accumulator beside the moments.
  if (optimizer.type == OptimizerType::kZeroOneAdam) return master + 12;
  // 1-bit LAMB: the fresh variance and the momentum before the step too.
  if (optimizer.type == OptimizerType::kOneBitLamb) return master + 16;
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

int64_t NvmeOffloadBufferBytes(const ZeroConfig &zero, int64_t elements, int64_t tensors) {
  constexpr int64_t kAlign = 4096;
  const int64_t piece = std::max<int64_t>(1, std::min(zero.sub_group_size, elements));
  const int64_t pieces = (std::max<int64_t>(elements, 1) + piece - 1) / piece;
  const int64_t slot = (std::max<int64_t>(1, tensors * piece * 4) + kAlign - 1) / kAlign * kAlign;
  return std::clamp<int64_t>(zero.offload_optimizer_buffer_count, 1, pieces) * slot;
}

int64_t CompressionStateBytes(const GradientCompressionConfig &compression, int64_t num_parameters,
                              int64_t dp_size, int stage) {
  if (!compression.enabled || dp_size <= 1) return 0;
  const ShardLayout flat(num_parameters, dp_size);
  if (compression.target == "update") return UpdateExchange::StateBytes(num_parameters);
  const CodecOptions codec = CodecOptionsOf(compression, OptimizerConfig{});
  if (stage <= 1) return CompressionMemoryOf(codec, flat.padded, 1, dp_size).residual_bytes;
  return SparseReduceScatter::StateBytes(codec, flat);
}

ModelStateBytes EstimateRankModelState(int64_t num_parameters, const Config &config,
                                       int64_t stage3_persistent_elements,
                                       int64_t largest_swapped_share, int64_t fp32_elements) {
  const DType precision = config.precision();
  ModelStateBytes b =
      EstimateModelState(num_parameters, config.dp_size, config.zero.stage,
                         SteppedOptimizer(config), stage3_persistent_elements, precision);
  if (precision != DType::kFloat32) {
    b.parameters += 4 * fp32_elements;
    b.gradients += 4 * fp32_elements;
  }
  const int64_t elements = ShardLayout(num_parameters, config.dp_size).shard_size();
  const bool swap_params = config.zero.offload_param_device == "nvme" && config.zero.stage == 3;
  if (swap_params) {
    const int64_t width = precision == DType::kFloat32 ? 4 : 2;
    const int64_t swapped = elements - std::min(config.zero.offload_param_max_in_cpu, elements);
    if (swapped > 0)
      b.parameters += ParamSwapBufferBytes(swapped * width, largest_swapped_share * width,
                                           config.zero.offload_param_buffer_count) -
                      swapped * width;
    if (precision == DType::kFloat32) b.optimizer_state += 4 * elements;  // master weights
  }
  const int64_t residual = CompressionStateBytes(config.gradient_compression, num_parameters,
                                                 config.dp_size, config.zero.stage);
  b.optimizer_state += residual;
  // ZeRO-Offload on a device (data_parallel.cc): the reduced gradients of
  // this rank's state range come down into a host copy during the backward
  // where a reduction makes them final (ZeRO 2/3, or more than one rank),
  // and fp32 training keeps its master weights beside the state on the host
  // (the parameters stay in device memory).
  const bool host_state =
      config.runtime.device == "cuda" && config.zero.offload_optimizer_device != "none";
  if (host_state && (config.zero.stage >= 2 || config.dp_size > 1))
    b.gradients += (precision == DType::kFloat32 ? 4 : 2) * elements;
  if (host_state && precision == DType::kFloat32 && !swap_params) b.optimizer_state += 4 * elements;
  if (config.zero.offload_optimizer_device != "nvme") return b;
  const int64_t tensors = OptimizerStateBytesPerParameter(SteppedOptimizer(config), precision) / 4 +
                          (precision == DType::kFloat32 ? 1 : 0);  // fp32: the weights' mirror
  b.optimizer_state = NvmeOffloadBufferBytes(config.zero, elements, tensors) + residual;
  return b;
}

}  // namespace dst
