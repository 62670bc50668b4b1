// AVX-512 forms of vector_math.h's AVX2 GELU and exp-and-sum loops: the same range reduction,
// polynomial and operation order in every lane (roundscale for round, the
// integer forms of and/or/andnot, which AVX-512F has for floats only with
// DQ), so each of the 16 lanes computes what an AVX2 lane does, bit for bit
// (tests/unit/test_vector_math.cc). Compiled for AVX-512F by function
// attribute and called only where BestSimdPath() says the CPU has it and
// DSTRAIN_CPU_ISA does not cap it.
// GCC 12's AVX-512 headers start intrinsics from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports at every use (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "core/kernels/cpu/cpu_adam.h"
#include "core/kernels/cpu/vector_math.h"

namespace dst::cpu {

#if DST_HAVE_AVX2
namespace {

#define DST_AVX512 __attribute__((target("avx512f")))

DST_AVX512 inline __m512 Exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(math::kExpMax)), _mm512_set1_ps(math::kExpMin));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(math::kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(math::kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(math::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(math::kExpP7);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(math::kExpP6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(math::kExpP5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(math::kExpP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(math::kExpP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(math::kExpP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(math::kExpP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(math::kExpP0));
  const __m512i bits =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

// tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|).
DST_AVX512 inline __m512 Tanh16(__m512 x) {
  const __m512i sign = _mm512_set1_epi32(int(0x80000000u));
  const __m512i xi = _mm512_castps_si512(x);
  const __m512 ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign, xi));
  const __m512 e = Exp16(_mm512_mul_ps(ax, _mm512_set1_ps(-2.0f)));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), _mm512_and_si512(sign, xi)));
}

}  // namespace

DST_AVX512 int64_t GeluRange16(const float *x, float *out, int64_t begin, int64_t end) {
  const __m512 k = _mm512_set1_ps(math::kGeluScale), c = _mm512_set1_ps(math::kGeluCubic);
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 v3 = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
    const __m512 t = Tanh16(_mm512_mul_ps(k, _mm512_fmadd_ps(c, v3, v)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, t)));
  }
  return i;
}

DST_AVX512 int64_t GeluGradRange16(const float *dout, const float *x, float *dx, int64_t begin,
                                   int64_t end) {
  const __m512 k = _mm512_set1_ps(math::kGeluScale), c = _mm512_set1_ps(math::kGeluCubic);
  const __m512 c3 = _mm512_set1_ps(3.0f * math::kGeluCubic);
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 v2 = _mm512_mul_ps(v, v);
    const __m512 t = Tanh16(_mm512_mul_ps(k, _mm512_fmadd_ps(c, _mm512_mul_ps(v2, v), v)));
    const __m512 dinner = _mm512_mul_ps(k, _mm512_fmadd_ps(c3, v2, one));
    const __m512 sech2 = _mm512_fnmadd_ps(t, t, one);
    const __m512 grad = _mm512_mul_ps(
        half, _mm512_fmadd_ps(_mm512_mul_ps(v, sech2), dinner, _mm512_add_ps(one, t)));
    _mm512_storeu_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(dout + i), grad));
  }
  return i;
}

DST_AVX512 int64_t TableProduct16(const float *dout, const uint16_t *index, const float *table,
                                  float *dx, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i at =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(index + i)));
    const __m512 looked_up = _mm512_i32gather_ps(at, table, 4);
    _mm512_storeu_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(dout + i), looked_up));
  }
  return i;
}

DST_AVX512 int64_t ExpShiftedAndSum16(float *x, int64_t n, float shift, __m256 *acc) {
  const __m512 s = _mm512_set1_ps(shift);
  __m256 sum = *acc;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    _mm512_storeu_ps(x + i, e);
    // The AVX2 form adds elements i..i+7, then i+8..i+15: the same two adds.
    sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
    sum = _mm256_add_ps(sum, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
  }
  *acc = sum;
  return i;
}

DST_AVX512 int64_t SiluMulRange16(const float *gate, const float *up, float *out, int64_t begin,
                                  int64_t end) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_storeu_ps(out + (i - begin), _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
  }
  return i;
}

DST_AVX512 int64_t SiluMulGradRange16(const float *dout, const float *gate, const float *up,
                                      float *dgate, float *dup, int64_t begin, int64_t end) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i), u = _mm512_loadu_ps(up + i);
    const __m512 d = _mm512_loadu_ps(dout + i);
    const __m512 denom = _mm512_add_ps(one, Exp16(_mm512_sub_ps(_mm512_setzero_ps(), g)));
    const __m512 s = _mm512_div_ps(one, denom);
    const __m512 grad = _mm512_mul_ps(s, _mm512_fmadd_ps(g, _mm512_sub_ps(one, s), one));
    _mm512_storeu_ps(dgate + i, _mm512_mul_ps(_mm512_mul_ps(d, u), grad));
    _mm512_storeu_ps(dup + i, _mm512_mul_ps(d, _mm512_div_ps(g, denom)));
  }
  return i;
}

#undef DST_AVX512
#endif
#pragma GCC diagnostic pop

bool Avx512Elementwise() {
  static const bool wide = BestSimdPath() == SimdPath::kAvx512;
  return wide;
}

}  // namespace dst::cpu
