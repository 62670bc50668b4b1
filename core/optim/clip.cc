#include "core/optim/clip.h"

#include <cmath>

#include "core/kernels/cpu/optimizers.h"
#include "core/kernels/cpu/reduce.h"

namespace dst {

double GradNorm(const float *grads, int64_t n) {
  return std::sqrt(cpu::SumOfSquares(grads, n));
}

double ClipGradNorm(float *grads, int64_t n, double max_norm) {
  const double norm = GradNorm(grads, n);
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) cpu::Scale(grads, n, float(coef));
  }
  return norm;
}

}  // namespace dst
