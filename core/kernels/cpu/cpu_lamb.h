// CPU-Lamb: DeepSpeed's FusedLamb on the host, in CPU-Adam's style (run-time
// AVX-512F / AVX2 / scalar paths that compute every element with the same
// operations in the same order, no fused multiply-adds). Lamb scales each
// tensor's Adam-like update by a trust ratio ||w|| / ||u|| (clamped to
// [min_coeff, max_coeff]) that needs the whole tensor's norms first, so a
// step is two passes: LambMoments updates the moments and returns the
// range's sums of w^2 and u^2 (the caller adds them up over the tensor's
// pieces, shards and tensor-parallel slices), LambApply moves the weights.
#pragma once

#include <cstdint>

#include "core/kernels/cpu/cpu_adam.h"
#include "core/kernels/elementwise_math.h"
#include "core/precision/half_ops.h"

namespace dst::cpu {

// FusedLamb's parameters; `step` 1-based.
struct LambHyper {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
  bool bias_correction = true;  // step size lr sqrt(1 - beta2^t) / (1 - beta1^t)
  bool eps_inside_sqrt = false;
  double max_coeff = 10.0, min_coeff = 0.01;
};

struct LambRange {
  float *param = nullptr;       // [n] fp32 (master) weights
  const float *grad = nullptr;  // [n] (LambMoments only)
  float *exp_avg = nullptr;     // [n]
  float *exp_avg_sq = nullptr;  // [n]
  int64_t n = 0;
  float grad_mul = 1.0f;         // applied to the gradient first (unscale x clip)
  uint16_t *half_out = nullptr;  // [n] the weights in 16 bits after either pass, or null
  Half half = Half::kBf16;
};

// A range's share of a tensor's two squared norms.
struct LambSums {
  double weight = 0;  // sum w^2
  double update = 0;  // sum u^2
};

math::LambConstants LambConstantsFor(const LambHyper &h, float grad_mul);
// The step size before the trust ratio (lr, bias-corrected when asked).
double LambStepSize(const LambHyper &h);
// The trust ratio from a whole tensor's sums: ||w|| / ||u|| clamped to
// [min_coeff, max_coeff]; 1 when either norm is zero.
float LambTrustRatio(const LambSums &whole, const LambHyper &h);

// The first pass over the range on `path` (one thread) / over the OpenMP
// threads: moments updated, the weights' 16-bit copy (half_out) written
// unchanged, the sums returned.
LambSums LambMomentsOn(const LambRange &r, const LambHyper &h, SimdPath path);
LambSums LambMoments(const LambRange &r, const LambHyper &h, SimdPath path = BestSimdPath());
// The second pass: w -= step_size x trust x u, the 16-bit copy written.
void LambApplyOn(const LambRange &r, const LambHyper &h, float trust, SimdPath path);
void LambApply(const LambRange &r, const LambHyper &h, float trust, SimdPath path = BestSimdPath());

// 1-bit LAMB after its warm-up (DeepSpeed's OnebitLamb), one whole tensor at
// a time, on the host thread (the 1-bit optimizers run at ZeRO 0 only).
struct OneBitLambTensor {
  float scaling = 1;       // the momenta's mean RMS / this tensor's, at the freeze
  float coeff_freeze = 0;  // the warm-up's running average of its trust ratio
  float last_factor = 1;   // the factor of the previous step (updated)
};
struct OneBitLambBounds {
  double factor_max = 4.0, factor_min = 0.5, threshold = 0.1;
};
// m_last = m; m = (b1 m + (1 - b1) g grad_mul) x scaling; the weights' copy written.
void OneBitLambMomentum(const LambRange &r, const LambHyper &h, float scaling, float *m_last);
// After the momenta's exchange, in three steps so that a tensor split over
// ranks (tensor-parallel slices) is scaled as a whole:
//   OneBitLambStats over each part: m /= scaling; the gradient it implies,
//     (m - b1 m_last) / (1 - b1), into the fresh variance v_fresh; the part's
//     max(denom / fresh denom) and squared norms of m / denom and of the update;
//   OneBitLambScale from the whole tensor's (max of the maxima, sums of the
//     sums): the factor, moved towards 1 by the decay's share of the update,
//     clamped to the bounds and to last_factor x (1 +- threshold) (kept as
//     the new last_factor); returns lr x coeff_freeze x factor;
//   OneBitLambFinish over each part: w -= scale x (m / denom + wd w).
struct OneBitLambPartial {
  double ratio_max = 0, prelim2 = 0, update2 = 0;
};
OneBitLambPartial OneBitLambStats(const LambRange &r, const LambHyper &h, const float *m_last,
                                  float *v_fresh, float scaling);
float OneBitLambScale(const OneBitLambPartial &whole, const LambHyper &h,
                      const OneBitLambBounds &bounds, OneBitLambTensor *t);
void OneBitLambFinish(const LambRange &r, const LambHyper &h, float scale);

}  // namespace dst::cpu
