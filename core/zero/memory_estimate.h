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
// Communication staging buffers (kCommunication) are not model state.
#pragma once

#include <cstdint>

#include "core/config/config.h"

namespace dst {

struct ModelStateBytes {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0;
  int64_t total() const { return parameters + gradients + optimizer_state; }
};

int64_t OptimizerStateBytesPerParameter(const OptimizerConfig &optimizer);

ModelStateBytes EstimateModelState(int64_t num_parameters, int64_t dp_size, int stage,
                                   const OptimizerConfig &optimizer,
                                   int64_t stage3_persistent_elements = 0);

}  // namespace dst
