// Fused optimizer updates over flat parameter ranges. One pass reads param,
// grad and state once and writes param and state once.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/kernels/elementwise_math.h"

namespace dst::cpu {

// Adam / AdamW, torch.optim semantics. `step` is 1-based (after increment).
// decoupled: AdamW (param *= 1 - lr*wd); else L2 (grad += wd*param).
struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
  bool decoupled;
  bool bias_correction = true;  // false: the raw moments (FusedAdam's bias_correction=False)
};

template <typename T>
void AdamUpdate(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, int64_t n, const AdamHyper &h) {
  const T b1 = T(h.beta1), b2 = T(h.beta2);
  const T bias1 = h.bias_correction ? T(1 - std::pow(h.beta1, double(h.step))) : T(1);
  const T bias2_sqrt =
      h.bias_correction ? T(std::sqrt(1 - std::pow(h.beta2, double(h.step)))) : T(1);
  const T step_size = T(h.lr) / bias1;
  const T decay = h.decoupled ? T(1 - h.lr * h.weight_decay) : T(1);
  const T l2 = h.decoupled ? T(0) : T(h.weight_decay);
  const T eps = T(h.eps);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i] + l2 * param[i];
    const T m = b1 * exp_avg[i] + (T(1) - b1) * g;
    const T v = b2 * exp_avg_sq[i] + (T(1) - b2) * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const T denom = std::sqrt(v) / bias2_sqrt + eps;
    param[i] = param[i] * decay - step_size * m / denom;
  }
}

// SGD with momentum, torch.optim.SGD semantics (first step: buf = grad).
struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first_step;
};

template <typename T>
void SgdUpdate(T *param, const T *grad, T *momentum_buf, int64_t n, const SgdHyper &h) {
  const T lr = T(h.lr), mom = T(h.momentum), damp = T(1 - h.dampening), wd = T(h.weight_decay);
  const bool use_momentum = h.momentum != 0;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i)
    math::SgdElement(param[i], grad[i], use_momentum ? momentum_buf + i : nullptr, lr, mom, damp,
                     wd, h.nesterov, h.first_step);
}

// x *= k.
template <typename T>
void Scale(T *x, int64_t n, T k) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= k;
}

}  // namespace dst::cpu
