// Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_).
#pragma once

#include <cstdint>

namespace dst {

// L2 norm of grads[0, n), accumulated in double, deterministic.
double GradNorm(const float *grads, int64_t n);

// Scales grads by max_norm / (norm + 1e-6) when that is < 1. Returns the norm
// before clipping. max_norm <= 0 only measures.
double ClipGradNorm(float *grads, int64_t n, double max_norm);

}  // namespace dst
