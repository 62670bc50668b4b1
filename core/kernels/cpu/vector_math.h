// AVX2 paths for the transcendental loops (exp in softmax/cross-entropy, tanh
// in GELU; GELU also in AVX-512, bit-equal to its AVX2 form). GCC does not vectorise the scalar
// forms in elementwise_math.h (their range clamps become control flow), so the float kernels call
// these; the double instantiations (gradient checks) and non-AVX2 builds use the scalar forms,
// which compute the same formulas.
#pragma once

#include <cstdint>

#include "core/kernels/elementwise_math.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define DST_HAVE_AVX2 1
#endif

namespace dst::cpu {

#if DST_HAVE_AVX2
// Eight lanes of math::FastExp (same range reduction and polynomial).
inline __m256 Exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(math::kExpMax)), _mm256_set1_ps(math::kExpMin));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(math::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(math::kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(math::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(math::kExpP7);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kExpP6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kExpP5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kExpP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kExpP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kExpP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kExpP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kExpP0));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|).
inline __m256 Tanh8(__m256 x) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign_mask, x);
  const __m256 e = Exp8(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  return _mm256_or_ps(t, _mm256_and_ps(sign_mask, x));
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

// ExpShiftedAndSum's double form (the gradient checks).
inline double ExpShiftedAndSum(double *x, int64_t n, double shift) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = math::FastExp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

// Whether the element-wise loops below take their AVX-512 form (the CPU has
// AVX-512F and DSTRAIN_CPU_ISA does not cap it at AVX2; vector_math_avx512.cc).
bool Avx512Elementwise();
#if DST_HAVE_AVX2
// The AVX-512 forms: process [begin, end) 16 at a time, return where they
// stopped (the rest is left to the AVX2 and scalar loops). Every lane equals
// the AVX2 form's bit for bit. Call only where Avx512Elementwise().
int64_t GeluRange16(const float *x, float *out, int64_t begin, int64_t end);
int64_t GeluGradRange16(const float *dout, const float *x, float *dx, int64_t begin, int64_t end);
// ExpShiftedAndSum's loop 16 at a time from 0, adding into the AVX2 form's
// eight partial sums *acc in its order (so the total is the same bits too).
int64_t ExpShiftedAndSum16(float *x, int64_t n, float shift, __m256 *acc);
int64_t SiluMulRange16(const float *gate, const float *up, float *out, int64_t begin, int64_t end);
// dx[i] = dout[i] * table[index[i]], 16 at a time from 0 (TableProduct).
int64_t TableProduct16(const float *dout, const uint16_t *index, const float *table, float *dx,
                       int64_t n);
int64_t SiluMulGradRange16(const float *dout, const float *gate, const float *up, float *dgate,
                           float *dup, int64_t begin, int64_t end);
#endif

// x[i] = exp(x[i] - shift) for i < n; returns the sum of the new values (the
// softmax of attention and of the loss). `wide`: the AVX-512 form first.
inline float ExpShiftedAndSum(float *x, int64_t n, float shift, bool wide = Avx512Elementwise()) {
  (void)wide;
  int64_t i = 0;
  float sum = 0.0f;
#if DST_HAVE_AVX2
  __m256 acc = _mm256_setzero_ps();
  if (wide) i = ExpShiftedAndSum16(x, n, shift, &acc);
  const __m256 s = _mm256_set1_ps(shift);
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  sum = HorizontalSum(acc);
#endif
  for (; i < n; ++i) {
    x[i] = math::FastExp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

// out[i] = gelu(x[i]) for i in [begin, end); `wide`: the AVX-512 form first.
inline void GeluRange(const float *x, float *out, int64_t begin, int64_t end,
                      bool wide = Avx512Elementwise()) {
  (void)wide;
  int64_t i = begin;
#if DST_HAVE_AVX2
  if (wide) i = GeluRange16(x, out, begin, end);
  const __m256 k = _mm256_set1_ps(math::kGeluScale), c = _mm256_set1_ps(math::kGeluCubic);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= end; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 t = Tanh8(_mm256_mul_ps(k, _mm256_fmadd_ps(c, v3, v)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, t)));
  }
#endif
  for (; i < end; ++i) out[i] = math::Gelu(x[i]);
}
inline void GeluRange(const double *x, double *out, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) out[i] = math::Gelu(x[i]);
}

// dx[i] = dout[i] * gelu'(x[i]) for i in [begin, end) (dx may alias dout).
inline void GeluGradRange(const float *dout, const float *x, float *dx, int64_t begin, int64_t end,
                          bool wide = Avx512Elementwise()) {
  (void)wide;
  int64_t i = begin;
#if DST_HAVE_AVX2
  if (wide) i = GeluGradRange16(dout, x, dx, begin, end);
  const __m256 k = _mm256_set1_ps(math::kGeluScale), c = _mm256_set1_ps(math::kGeluCubic);
  const __m256 c3 = _mm256_set1_ps(3.0f * math::kGeluCubic);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= end; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 v2 = _mm256_mul_ps(v, v);
    const __m256 t = Tanh8(_mm256_mul_ps(k, _mm256_fmadd_ps(c, _mm256_mul_ps(v2, v), v)));
    const __m256 dinner = _mm256_mul_ps(k, _mm256_fmadd_ps(c3, v2, one));
    const __m256 sech2 = _mm256_fnmadd_ps(t, t, one);
    // 0.5 (1 + t) + 0.5 x (1 - t^2) dinner
    const __m256 grad = _mm256_mul_ps(
        half, _mm256_fmadd_ps(_mm256_mul_ps(v, sech2), dinner, _mm256_add_ps(one, t)));
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dout + i), grad));
  }
#endif
  for (; i < end; ++i) dx[i] = dout[i] * math::GeluGrad(x[i]);
}
// dx[i] = dout[i] * table[index[i]] for i in [0, n) (dx may alias dout): a
// function of a 16-bit value read from its table of every value.
inline void TableProduct(const float *dout, const uint16_t *index, const float *table, float *dx,
                         int64_t n, bool wide = Avx512Elementwise()) {
  (void)wide;
  int64_t i = 0;
#if DST_HAVE_AVX2
  if (wide) i = TableProduct16(dout, index, table, dx, n);
  for (; i + 8 <= n; i += 8) {
    const __m256i at =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(index + i)));
    const __m256 looked_up = _mm256_i32gather_ps(table, at, 4);
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dout + i), looked_up));
  }
#endif
  for (; i < n; ++i) dx[i] = dout[i] * table[index[i]];
}
inline void GeluGradRange(const double *dout, const double *x, double *dx, int64_t begin,
                          int64_t end) {
  for (int64_t i = begin; i < end; ++i) dx[i] = dout[i] * math::GeluGrad(x[i]);
}

// out[i - begin] = silu(gate[i]) * up[i] for i in [begin, end) (SwiGLU's
// activation; out is indexed from begin so that a block may go to a buffer).
inline void SiluMulRange(const float *gate, const float *up, float *out, int64_t begin, int64_t end,
                         bool wide = Avx512Elementwise()) {
  (void)wide;
  int64_t i = begin;
#if DST_HAVE_AVX2
  if (wide) i = SiluMulRange16(gate, up, out, begin, end);
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= end; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + (i - begin), _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
#endif
  for (; i < end; ++i) out[i - begin] = math::Silu(gate[i]) * up[i];
}
template <typename T>
inline void SiluMulRange(const T *gate, const T *up, T *out, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) out[i - begin] = math::Silu(gate[i]) * up[i];
}

// dgate[i] = dout[i] up[i] silu'(gate[i]), dup[i] = dout[i] silu(gate[i]) for i
// in [begin, end) (either output may alias dout, not both).
inline void SiluMulGradRange(const float *dout, const float *gate, const float *up, float *dgate,
                             float *dup, int64_t begin, int64_t end,
                             bool wide = Avx512Elementwise()) {
  (void)wide;
  int64_t i = begin;
#if DST_HAVE_AVX2
  if (wide) i = SiluMulGradRange16(dout, gate, up, dgate, dup, begin, end);
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= end; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
    const __m256 d = _mm256_loadu_ps(dout + i);
    const __m256 denom = _mm256_add_ps(one, Exp8(_mm256_sub_ps(_mm256_setzero_ps(), g)));
    const __m256 s = _mm256_div_ps(one, denom);
    // s (1 + g (1 - s))
    const __m256 grad = _mm256_mul_ps(s, _mm256_fmadd_ps(g, _mm256_sub_ps(one, s), one));
    _mm256_storeu_ps(dgate + i, _mm256_mul_ps(_mm256_mul_ps(d, u), grad));
    _mm256_storeu_ps(dup + i, _mm256_mul_ps(d, _mm256_div_ps(g, denom)));
  }
#endif
  for (; i < end; ++i) {
    const float g = gate[i], u = up[i], d = dout[i];
    dgate[i] = d * u * math::SiluGrad(g);
    dup[i] = d * math::Silu(g);
  }
}
template <typename T>
inline void SiluMulGradRange(const T *dout, const T *gate, const T *up, T *dgate, T *dup,
                             int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T g = gate[i], u = up[i], d = dout[i];
    dgate[i] = d * u * math::SiluGrad(g);
    dup[i] = d * math::Silu(g);
  }
}

}  // namespace dst::cpu
