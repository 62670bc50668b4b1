// Per-rank model-state memory of each ZeRO stage, as the engine allocates it
// (flat buffers padded to a multiple of the data-parallel size), so that
// `dstrain estimate` prints exactly what a run measures. fp32 training:
//   stage 0: params 4P, grads 4P, optimizer K*P
//   stage 1: params 4P, grads 4P, optimizer K*P/N
//   stage 2: params 4P, grads 4P/N, optimizer K*P/N
//   stage 3: params 4P/N + 4S, grads 4P/N, optimizer K*P/N
// with P the padded parameter count, N the dp size, K the optimizer's state
// bytes per parameter (Adam/AdamW 8, SGD with momentum 4, plain SGD 0), and S
// the elements of the stage-3 persistent tensors (numel <=
// stage3_param_persistence_threshold), which every rank also keeps whole.
// fp16/bf16 training (the ZeRO paper's mixed-precision layout, 2 + 2 + K with
// K = 4 for the fp32 master weights plus the optimizer's state):
//   stage 0: params 2P, grads 2P, optimizer (4 + k) P
//   stage 1: params 2P, grads 2P, optimizer (4 + k) P/N
//   stage 2: params 2P, grads 2P/N, optimizer (4 + k) P/N
//   stage 3: params 2P/N + 2S, grads 2P/N, optimizer (4 + k) P/N
// With fp16/bf16_override_modules the listed types' F elements add 4F to
// parameters and 4F to gradients (fp32, whole on every rank), and leave S.
// Communication staging buffers and the fp32 working copies a layer reads
// under 16 bits (kCommunication) are not model state.
#pragma once

#include <cstdint>

#include "core/config/config.h"

namespace dst {

struct ModelStateBytes {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0;
  int64_t total() const { return parameters + gradients + optimizer_state; }
};

// The optimizer's own state (Adam 8, SGD with momentum 4, plain SGD 0), plus 4
// for the fp32 master weights under mixed precision: K.
int64_t OptimizerStateBytesPerParameter(const OptimizerConfig &optimizer,
                                        DType precision = DType::kFloat32);

// The optimizer's NVMe tier in memory for a state range of `elements` with
// `tensors` state tensors (the optimizer's, plus the fp32 master weights or
// their mirror): min(buffer_count, pieces) buffers of one piece of every
// tensor (sub_group_size elements), rounded up to 4 KiB (O_DIRECT).
int64_t NvmeOffloadBufferBytes(const ZeroConfig &zero, int64_t elements, int64_t tensors);

// gradient_compression's error-feedback residual per rank, fp32 (optimizer
// state): the whole buffer at ZeRO 0/1 (every bucket is encoded), the ranges
// a rank sends at ZeRO 2/3 (all but its own shard); with momentum correction
// also the rank's velocity (the whole buffer); none on one rank.
int64_t CompressionStateBytes(const GradientCompressionConfig &compression, int64_t num_parameters,
                              int64_t dp_size, int stage);

// EstimateModelState with the optimizer tier where the config puts it: on
// NVMe its resident bytes are the piece buffers (category "offload").
// offload_param nvme (ZeRO 3): the shard beyond max_in_cpu elements leaves
// the parameters; the swap's windows (`largest_swapped_share` elements
// each, LargestSwappedShare) and write buffers count instead, and fp32
// training keeps master weights.
// fp16/bf16_override_modules: `fp32_elements` (the listed types' tensors)
// also keep fp32 values and gradients, whole on every rank: 4F + 4F (their
// 16-bit copies stay in the flat buffers).
ModelStateBytes EstimateRankModelState(int64_t num_parameters, const Config &config,
                                       int64_t stage3_persistent_elements,
                                       int64_t largest_swapped_share = 0,
                                       int64_t fp32_elements = 0);

ModelStateBytes EstimateModelState(int64_t num_parameters, int64_t dp_size, int stage,
                                   const OptimizerConfig &optimizer,
                                   int64_t stage3_persistent_elements = 0,
                                   DType precision = DType::kFloat32);

}  // namespace dst
