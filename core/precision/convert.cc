#include "core/precision/convert.h"

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
#define DST_HAVE_F16C 1
#endif

namespace dst {

void HalfToFloat(const uint16_t *in, float *out, int64_t n) {
  int64_t i = 0;
#if DST_HAVE_F16C
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(in + i))));
#endif
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

void FloatToHalf(const float *in, uint16_t *out, int64_t n) {
  int64_t i = 0;
#if DST_HAVE_F16C
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

void BFloat16ToFloat(const uint16_t *in, float *out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(in[i]);
}

void FloatToBFloat16(const float *in, uint16_t *out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBFloat16(in[i]);
}

}  // namespace dst
