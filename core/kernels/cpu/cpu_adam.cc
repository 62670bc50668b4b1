// Compiled with -ffp-contract=off (CMakeLists.txt): the scalar path must not
// fuse a multiply and an add where the vector paths do not.
#include "core/kernels/cpu/cpu_adam.h"

#include "core/kernels/cpu/cpu_isa.h"

// GCC 12's AVX-512 headers start intrinsics from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports at every use (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/kernels/cpu/half_simd.h"
#include "core/precision/convert.h"

namespace dst::cpu {

math::AdamConstants AdamConstantsFor(const AdamHyper &h, float mul) {
  math::AdamConstants k;
  k.b1 = float(h.beta1);
  k.omb1 = 1.0f - float(h.beta1);
  k.b2 = float(h.beta2);
  k.omb2 = 1.0f - float(h.beta2);
  k.bias2_sqrt = h.bias_correction ? float(std::sqrt(1 - std::pow(h.beta2, double(h.step)))) : 1.0f;
  k.step_size =
      h.bias_correction ? float(h.lr) / float(1 - std::pow(h.beta1, double(h.step))) : float(h.lr);
  k.decay = h.decoupled ? float(1 - h.lr * h.weight_decay) : 1.0f;
  k.l2 = h.decoupled ? 0.0f : float(h.weight_decay);
  k.eps = float(h.eps);
  k.grad_mul = mul;
  return k;
}

namespace {

using math::AdamConstants;

// Element i, in the order the vector paths use (the shared formula).
inline void ScalarElement(const CpuAdamRange &r, const AdamConstants &k, int64_t i) {
  float p = r.param[i];
  math::AdamElement(p, r.grad[i], r.exp_avg[i], r.exp_avg_sq[i], k);
  r.param[i] = p;
  if (r.half_out) r.half_out[i] = r.half == Half::kBf16 ? FloatToBFloat16(p) : FloatToHalf(p);
}

void ScalarRange(const CpuAdamRange &r, const AdamConstants &k, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) ScalarElement(r, k, i);
}

__attribute__((target("avx2,fma,f16c"))) void Avx2Range(const CpuAdamRange &r,
                                                        const AdamConstants &k, int64_t begin,
                                                        int64_t end) {
  const __m256 b1 = _mm256_set1_ps(k.b1), omb1 = _mm256_set1_ps(k.omb1);
  const __m256 b2 = _mm256_set1_ps(k.b2), omb2 = _mm256_set1_ps(k.omb2);
  const __m256 bias2 = _mm256_set1_ps(k.bias2_sqrt), step = _mm256_set1_ps(k.step_size);
  const __m256 decay = _mm256_set1_ps(k.decay), l2 = _mm256_set1_ps(k.l2);
  const __m256 eps = _mm256_set1_ps(k.eps), mul = _mm256_set1_ps(k.grad_mul);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 p = _mm256_loadu_ps(r.param + i);
    const __m256 g =
        _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(r.grad + i), mul), _mm256_mul_ps(l2, p));
    const __m256 m =
        _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(r.exp_avg + i)), _mm256_mul_ps(omb1, g));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(r.exp_avg_sq + i)),
                                   _mm256_mul_ps(omb2, _mm256_mul_ps(g, g)));
    _mm256_storeu_ps(r.exp_avg + i, m);
    _mm256_storeu_ps(r.exp_avg_sq + i, v);
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bias2), eps);
    const __m256 updated =
        _mm256_sub_ps(_mm256_mul_ps(p, decay), _mm256_div_ps(_mm256_mul_ps(step, m), denom));
    _mm256_storeu_ps(r.param + i, updated);
    if (r.half_out) simd::StoreHalf8(r.half, updated, r.half_out + i);
  }
  ScalarRange(r, k, i, end);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, as above

__attribute__((target("avx512f,avx2,fma,f16c"))) void Avx512Range(const CpuAdamRange &r,
                                                                  const AdamConstants &k,
                                                                  int64_t begin, int64_t end) {
  const __m512 b1 = _mm512_set1_ps(k.b1), omb1 = _mm512_set1_ps(k.omb1);
  const __m512 b2 = _mm512_set1_ps(k.b2), omb2 = _mm512_set1_ps(k.omb2);
  const __m512 bias2 = _mm512_set1_ps(k.bias2_sqrt), step = _mm512_set1_ps(k.step_size);
  const __m512 decay = _mm512_set1_ps(k.decay), l2 = _mm512_set1_ps(k.l2);
  const __m512 eps = _mm512_set1_ps(k.eps), mul = _mm512_set1_ps(k.grad_mul);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 p = _mm512_loadu_ps(r.param + i);
    const __m512 g =
        _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(r.grad + i), mul), _mm512_mul_ps(l2, p));
    const __m512 m =
        _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(r.exp_avg + i)), _mm512_mul_ps(omb1, g));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(r.exp_avg_sq + i)),
                                   _mm512_mul_ps(omb2, _mm512_mul_ps(g, g)));
    _mm512_storeu_ps(r.exp_avg + i, m);
    _mm512_storeu_ps(r.exp_avg_sq + i, v);
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bias2), eps);
    const __m512 updated =
        _mm512_sub_ps(_mm512_mul_ps(p, decay), _mm512_div_ps(_mm512_mul_ps(step, m), denom));
    _mm512_storeu_ps(r.param + i, updated);
    if (r.half_out) simd::StoreHalf16(r.half, updated, r.half_out + i);
  }
  ScalarRange(r, k, i, end);
}

#pragma GCC diagnostic pop

void RangeOn(SimdPath path, const CpuAdamRange &r, const AdamConstants &k, int64_t begin,
             int64_t end) {
  switch (path) {
    case SimdPath::kAvx512:
      return Avx512Range(r, k, begin, end);
    case SimdPath::kAvx2:
      return Avx2Range(r, k, begin, end);
    case SimdPath::kScalar:
      break;
  }
  ScalarRange(r, k, begin, end);
}

}  // namespace

SimdPath BestSimdPath() {
  static const SimdPath best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && CpuIsaCap() == IsaCap::kNative)
      return SimdPath::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdPath::kAvx2;
    return SimdPath::kScalar;
  }();
  return best;
}

const char *SimdPathName(SimdPath path) {
  switch (path) {
    case SimdPath::kAvx512:
      return "avx512";
    case SimdPath::kAvx2:
      return "avx2";
    case SimdPath::kScalar:
      break;
  }
  return "scalar";
}

void CpuAdamUpdate(const CpuAdamRange &r, const AdamHyper &h, SimdPath path) {
  RangeOn(path, r, AdamConstantsFor(h, r.grad_mul), 0, r.n);
}

void CpuAdamStep(const CpuAdamRange &r, const AdamHyper &h, SimdPath path) {
  const AdamConstants k = AdamConstantsFor(h, r.grad_mul);
  constexpr int64_t kAlign = 64;  // elements per thread start on a cache line's multiple
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = ((r.n + threads - 1) / threads + kAlign - 1) / kAlign * kAlign;
    const int64_t begin = std::min(r.n, t * per), end = std::min(r.n, begin + per);
    if (begin < end) RangeOn(path, r, k, begin, end);
  }
}

void CpuAdamMomentum(const CpuAdamRange &r, const AdamHyper &h) {
  const AdamConstants k = AdamConstantsFor(h, r.grad_mul);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < r.n; ++i)
    r.exp_avg[i] = k.b1 * r.exp_avg[i] + k.omb1 * (r.grad[i] * k.grad_mul);
}

void CpuAdamApply(const CpuAdamRange &r, const AdamHyper &h) {
  const AdamConstants k = AdamConstantsFor(h, r.grad_mul);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < r.n; ++i) {
    float p = r.param[i];
    math::AdamApplyElement(p, r.exp_avg[i], r.exp_avg_sq[i], k);
    r.param[i] = p;
    if (r.half_out) r.half_out[i] = r.half == Half::kBf16 ? FloatToBFloat16(p) : FloatToHalf(p);
  }
}

void CpuZeroOneUpdate(const CpuAdamRange &r, const AdamHyper &h, ZeroOnePhase phase, float *acc,
                      float lrs) {
  const AdamConstants k = AdamConstantsFor(h, r.grad_mul);
  const float lr = float(h.lr), wd = float(h.weight_decay);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < r.n; ++i) {
    float &p = r.param[i], &m = r.exp_avg[i];
    const float denom = std::sqrt(r.exp_avg_sq[i]) + k.eps;
    switch (phase) {
      case ZeroOnePhase::kCapture:
        acc[i] = r.grad[i] * k.grad_mul;
        break;
      case ZeroOnePhase::kLocal: {
        m = k.b1 * m + k.omb1 * (r.grad[i] * k.grad_mul);
        const float d = -(lr * (m / denom + wd * p));
        p = p + d;
        acc[i] = acc[i] + d;
        break;
      }
      case ZeroOnePhase::kSyncOut:
        p = p - acc[i];
        acc[i] = acc[i] * denom;
        break;
      case ZeroOnePhase::kSyncIn:
        m = -acc[i] / lrs;
        p = p + acc[i] / denom;
        acc[i] = 0.0f;
        break;
    }
    if (r.half_out) r.half_out[i] = r.half == Half::kBf16 ? FloatToBFloat16(p) : FloatToHalf(p);
  }
}

}  // namespace dst::cpu
