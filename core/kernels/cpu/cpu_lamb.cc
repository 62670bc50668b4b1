// Compiled with -ffp-contract=off (CMakeLists.txt), as CPU-Adam: the paths
// agree element for element.
#include "core/kernels/cpu/cpu_lamb.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels/cpu/half_simd.h"
#include "core/precision/convert.h"

namespace dst::cpu {

math::LambConstants LambConstantsFor(const LambHyper &h, float grad_mul) {
  math::LambConstants k;
  k.b1 = float(h.beta1);
  k.omb1 = 1.0f - float(h.beta1);
  k.b2 = float(h.beta2);
  k.omb2 = 1.0f - float(h.beta2);
  k.eps = float(h.eps);
  k.eps_inside_sqrt = h.eps_inside_sqrt;
  k.weight_decay = float(h.weight_decay);
  k.grad_mul = grad_mul;
  return k;
}

double LambStepSize(const LambHyper &h) {
  if (!h.bias_correction) return h.lr;
  const double t = double(h.step);
  return h.lr * std::sqrt(1 - std::pow(h.beta2, t)) / (1 - std::pow(h.beta1, t));
}

float LambTrustRatio(const LambSums &whole, const LambHyper &h) {
  const double w = std::sqrt(whole.weight), u = std::sqrt(whole.update);
  if (w == 0 || u == 0 || !std::isfinite(w / u)) return 1.0f;
  return float(std::clamp(w / u, h.min_coeff, h.max_coeff));
}

namespace {

using math::LambConstants;

// Lanes accumulate squares in float over blocks this long, then into double.
constexpr int64_t kBlock = 1024;

void StoreHalf(const LambRange &r, int64_t i, float p) {
  if (r.half_out) r.half_out[i] = r.half == Half::kBf16 ? FloatToBFloat16(p) : FloatToHalf(p);
}

LambSums ScalarMoments(const LambRange &r, const LambConstants &k, int64_t begin, int64_t end) {
  LambSums s;
  for (int64_t i = begin; i < end; ++i) {
    const float p = r.param[i];
    const float u = math::LambMomentsElement(p, r.grad[i], r.exp_avg[i], r.exp_avg_sq[i], k);
    s.weight += double(p) * double(p);
    s.update += double(u) * double(u);
    StoreHalf(r, i, p);
  }
  return s;
}

void ScalarApply(const LambRange &r, const LambConstants &k, float scale, int64_t begin,
                 int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float u = math::LambDirection(r.param[i], r.exp_avg[i], r.exp_avg_sq[i], k);
    r.param[i] = r.param[i] - scale * u;
    StoreHalf(r, i, r.param[i]);
  }
}

__attribute__((target("avx2,fma"))) double Sum8(__m256 x) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, x);
  double s = 0;
  for (float v : lanes) s += double(v);
  return s;
}

__attribute__((target("avx2,fma"))) __m256 Denom8(__m256 v, const LambConstants &k) {
  const __m256 eps = _mm256_set1_ps(k.eps);
  return k.eps_inside_sqrt ? _mm256_sqrt_ps(_mm256_add_ps(v, eps))
                           : _mm256_add_ps(_mm256_sqrt_ps(v), eps);
}

__attribute__((target("avx2,fma"))) __m256 Direction8(__m256 p, __m256 m, __m256 v,
                                                      const LambConstants &k) {
  return _mm256_add_ps(_mm256_div_ps(m, Denom8(v, k)),
                       _mm256_mul_ps(_mm256_set1_ps(k.weight_decay), p));
}

__attribute__((target("avx2,fma,f16c"))) LambSums Avx2Moments(const LambRange &r,
                                                              const LambConstants &k, int64_t begin,
                                                              int64_t end) {
  const __m256 b1 = _mm256_set1_ps(k.b1), omb1 = _mm256_set1_ps(k.omb1);
  const __m256 b2 = _mm256_set1_ps(k.b2), omb2 = _mm256_set1_ps(k.omb2);
  const __m256 mul = _mm256_set1_ps(k.grad_mul);
  LambSums s;
  int64_t i = begin;
  while (i + 8 <= end) {
    __m256 w2 = _mm256_setzero_ps(), u2 = _mm256_setzero_ps();
    const int64_t stop = std::min(end, i + kBlock);
    for (; i + 8 <= stop; i += 8) {
      const __m256 p = _mm256_loadu_ps(r.param + i);
      const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(r.grad + i), mul);
      const __m256 m =
          _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(r.exp_avg + i)), _mm256_mul_ps(omb1, g));
      const __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(r.exp_avg_sq + i)),
                                     _mm256_mul_ps(omb2, _mm256_mul_ps(g, g)));
      _mm256_storeu_ps(r.exp_avg + i, m);
      _mm256_storeu_ps(r.exp_avg_sq + i, v);
      const __m256 u = Direction8(p, m, v, k);
      w2 = _mm256_add_ps(w2, _mm256_mul_ps(p, p));
      u2 = _mm256_add_ps(u2, _mm256_mul_ps(u, u));
      if (r.half_out) simd::StoreHalf8(r.half, p, r.half_out + i);
    }
    s.weight += Sum8(w2);
    s.update += Sum8(u2);
  }
  const LambSums tail = ScalarMoments(r, k, i, end);
  return {s.weight + tail.weight, s.update + tail.update};
}

__attribute__((target("avx2,fma,f16c"))) void Avx2Apply(const LambRange &r, const LambConstants &k,
                                                        float scale, int64_t begin, int64_t end) {
  const __m256 step = _mm256_set1_ps(scale);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 p = _mm256_loadu_ps(r.param + i);
    const __m256 u =
        Direction8(p, _mm256_loadu_ps(r.exp_avg + i), _mm256_loadu_ps(r.exp_avg_sq + i), k);
    const __m256 updated = _mm256_sub_ps(p, _mm256_mul_ps(step, u));
    _mm256_storeu_ps(r.param + i, updated);
    if (r.half_out) simd::StoreHalf8(r.half, updated, r.half_out + i);
  }
  ScalarApply(r, k, scale, i, end);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593 (half_simd.h)

__attribute__((target("avx512f"))) double Sum16(__m512 x) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, x);
  double s = 0;
  for (float v : lanes) s += double(v);
  return s;
}

__attribute__((target("avx512f"))) __m512 Direction16(__m512 p, __m512 m, __m512 v,
                                                      const LambConstants &k) {
  const __m512 eps = _mm512_set1_ps(k.eps);
  const __m512 denom = k.eps_inside_sqrt ? _mm512_sqrt_ps(_mm512_add_ps(v, eps))
                                         : _mm512_add_ps(_mm512_sqrt_ps(v), eps);
  return _mm512_add_ps(_mm512_div_ps(m, denom), _mm512_mul_ps(_mm512_set1_ps(k.weight_decay), p));
}

__attribute__((target("avx512f,avx2,fma,f16c"))) LambSums Avx512Moments(const LambRange &r,
                                                                        const LambConstants &k,
                                                                        int64_t begin,
                                                                        int64_t end) {
  const __m512 b1 = _mm512_set1_ps(k.b1), omb1 = _mm512_set1_ps(k.omb1);
  const __m512 b2 = _mm512_set1_ps(k.b2), omb2 = _mm512_set1_ps(k.omb2);
  const __m512 mul = _mm512_set1_ps(k.grad_mul);
  LambSums s;
  int64_t i = begin;
  while (i + 16 <= end) {
    __m512 w2 = _mm512_setzero_ps(), u2 = _mm512_setzero_ps();
    const int64_t stop = std::min(end, i + kBlock);
    for (; i + 16 <= stop; i += 16) {
      const __m512 p = _mm512_loadu_ps(r.param + i);
      const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(r.grad + i), mul);
      const __m512 m =
          _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(r.exp_avg + i)), _mm512_mul_ps(omb1, g));
      const __m512 v = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(r.exp_avg_sq + i)),
                                     _mm512_mul_ps(omb2, _mm512_mul_ps(g, g)));
      _mm512_storeu_ps(r.exp_avg + i, m);
      _mm512_storeu_ps(r.exp_avg_sq + i, v);
      const __m512 u = Direction16(p, m, v, k);
      w2 = _mm512_add_ps(w2, _mm512_mul_ps(p, p));
      u2 = _mm512_add_ps(u2, _mm512_mul_ps(u, u));
      if (r.half_out) simd::StoreHalf16(r.half, p, r.half_out + i);
    }
    s.weight += Sum16(w2);
    s.update += Sum16(u2);
  }
  const LambSums tail = ScalarMoments(r, k, i, end);
  return {s.weight + tail.weight, s.update + tail.update};
}

__attribute__((target("avx512f,avx2,fma,f16c"))) void Avx512Apply(const LambRange &r,
                                                                  const LambConstants &k,
                                                                  float scale, int64_t begin,
                                                                  int64_t end) {
  const __m512 step = _mm512_set1_ps(scale);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 p = _mm512_loadu_ps(r.param + i);
    const __m512 u =
        Direction16(p, _mm512_loadu_ps(r.exp_avg + i), _mm512_loadu_ps(r.exp_avg_sq + i), k);
    const __m512 updated = _mm512_sub_ps(p, _mm512_mul_ps(step, u));
    _mm512_storeu_ps(r.param + i, updated);
    if (r.half_out) simd::StoreHalf16(r.half, updated, r.half_out + i);
  }
  ScalarApply(r, k, scale, i, end);
}

#pragma GCC diagnostic pop

LambSums MomentsOn(SimdPath path, const LambRange &r, const LambConstants &k, int64_t begin,
                   int64_t end) {
  switch (path) {
    case SimdPath::kAvx512:
      return Avx512Moments(r, k, begin, end);
    case SimdPath::kAvx2:
      return Avx2Moments(r, k, begin, end);
    case SimdPath::kScalar:
      break;
  }
  return ScalarMoments(r, k, begin, end);
}

void ApplyOn(SimdPath path, const LambRange &r, const LambConstants &k, float scale, int64_t begin,
             int64_t end) {
  switch (path) {
    case SimdPath::kAvx512:
      return Avx512Apply(r, k, scale, begin, end);
    case SimdPath::kAvx2:
      return Avx2Apply(r, k, scale, begin, end);
    case SimdPath::kScalar:
      break;
  }
  ScalarApply(r, k, scale, begin, end);
}

// Below this many elements a range runs on the calling thread (a bias, a
// norm's weight): a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;
constexpr int64_t kAlign = 64;  // a thread's part starts on a cache line's multiple

// f(begin, end) over the threads' contiguous parts of [0, n); returns each
// part's result in thread order.
template <typename F>
void OverThreads(int64_t n, F f) {
  if (n < kParallelMin) {
    f(0, 0, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = ((n + threads - 1) / threads + kAlign - 1) / kAlign * kAlign;
    const int64_t begin = std::min(n, t * per), end = std::min(n, begin + per);
    f(int(t), begin, end);
  }
}

}  // namespace

LambSums LambMomentsOn(const LambRange &r, const LambHyper &h, SimdPath path) {
  return MomentsOn(path, r, LambConstantsFor(h, r.grad_mul), 0, r.n);
}

LambSums LambMoments(const LambRange &r, const LambHyper &h, SimdPath path) {
  const LambConstants k = LambConstantsFor(h, r.grad_mul);
  std::vector<LambSums> parts(size_t(std::max(1, omp_get_max_threads())));
  OverThreads(r.n, [&](int t, int64_t begin, int64_t end) {
    if (begin < end) parts[size_t(t)] = MomentsOn(path, r, k, begin, end);
  });
  LambSums total;
  for (const LambSums &p : parts) total.weight += p.weight, total.update += p.update;
  return total;
}

void LambApplyOn(const LambRange &r, const LambHyper &h, float trust, SimdPath path) {
  const float scale = float(LambStepSize(h)) * trust;
  ApplyOn(path, r, LambConstantsFor(h, r.grad_mul), scale, 0, r.n);
}

void LambApply(const LambRange &r, const LambHyper &h, float trust, SimdPath path) {
  const LambConstants k = LambConstantsFor(h, r.grad_mul);
  const float scale = float(LambStepSize(h)) * trust;
  OverThreads(r.n, [&](int, int64_t begin, int64_t end) {
    if (begin < end) ApplyOn(path, r, k, scale, begin, end);
  });
}

void OneBitLambMomentum(const LambRange &r, const LambHyper &h, float scaling, float *m_last) {
  const LambConstants k = LambConstantsFor(h, r.grad_mul);
  for (int64_t i = 0; i < r.n; ++i) {
    m_last[i] = r.exp_avg[i];
    r.exp_avg[i] = (k.b1 * r.exp_avg[i] + k.omb1 * (r.grad[i] * k.grad_mul)) * scaling;
    StoreHalf(r, i, r.param[i]);
  }
}

OneBitLambPartial OneBitLambStats(const LambRange &r, const LambHyper &h, const float *m_last,
                                  float *v_fresh, float scaling) {
  const LambConstants k = LambConstantsFor(h, 1.0f);
  float ratio_max = 0;  // max denom / fresh denom
  double prelim2 = 0, update2 = 0;
  for (int64_t i = 0; i < r.n; ++i) {
    float &m = r.exp_avg[i];
    m = m / scaling;
    const float g = (m - m_last[i] * k.b1) / k.omb1;
    v_fresh[i] = k.b2 * v_fresh[i] + k.omb2 * (g * g);
    const float denom = std::sqrt(r.exp_avg_sq[i]) + k.eps;
    const float prelim = m / denom;
    const float update = prelim + k.weight_decay * r.param[i];
    ratio_max = std::max(ratio_max, denom / (std::sqrt(v_fresh[i]) + k.eps));
    prelim2 += double(prelim) * double(prelim);
    update2 += double(update) * double(update);
  }
  return {ratio_max, prelim2, update2};
}

float OneBitLambScale(const OneBitLambPartial &whole, const LambHyper &h,
                      const OneBitLambBounds &bounds, OneBitLambTensor *t) {
  double factor = whole.ratio_max;
  if (h.weight_decay > 0 && whole.update2 > 0) {
    const double share = std::min(1.0, std::sqrt(whole.prelim2) / std::sqrt(whole.update2));
    factor = factor * share + (1.0 - share);
  }
  factor = std::clamp(factor, bounds.factor_min, bounds.factor_max);
  const double last = t->last_factor;
  factor = std::clamp(factor, last * (1.0 - bounds.threshold), last * (1.0 + bounds.threshold));
  t->last_factor = float(factor);
  return float(h.lr) * (t->coeff_freeze * float(factor));
}

void OneBitLambFinish(const LambRange &r, const LambHyper &h, float scale) {
  const LambConstants k = LambConstantsFor(h, 1.0f);
  for (int64_t i = 0; i < r.n; ++i) {
    const float denom = std::sqrt(r.exp_avg_sq[i]) + k.eps;
    const float update = r.exp_avg[i] / denom + k.weight_decay * r.param[i];
    r.param[i] = r.param[i] - scale * update;
    StoreHalf(r, i, r.param[i]);
  }
}

}  // namespace dst::cpu
