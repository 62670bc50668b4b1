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

// bf16 is the top half of a float: widen to 32 bits and shift.
void BFloat16ToFloat(const uint16_t *in, float *out, int64_t n) {
  int64_t i = 0;
#if DST_HAVE_F16C
  for (; i + 8 <= n; i += 8) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
#endif
  for (; i < n; ++i) out[i] = BFloat16ToFloat(in[i]);
}

#if DST_HAVE_F16C
namespace {

// The scalar FloatToBFloat16's integer steps on eight lanes (so the same
// bits): NaN -> its top half, quieted; else x + 0x7FFF + (bit 16 of x), top
// half. Each 32-bit lane holds its 16-bit result.
inline __m256i BFloat16Lanes(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)),
                                         _mm256_set1_epi32(0x7F800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i quieted = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quieted, nan);
}

// The eight 16-bit values of BFloat16Lanes, in order, into out[0, 8).
inline void StoreLanes16(__m256i lanes, uint16_t *out) {
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lanes, lanes), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(out), _mm256_castsi256_si128(packed));
}

}  // namespace
#endif

void FloatToBFloat16(const float *in, uint16_t *out, int64_t n) {
  int64_t i = 0;
#if DST_HAVE_F16C
  for (; i + 8 <= n; i += 8) StoreLanes16(BFloat16Lanes(_mm256_loadu_ps(in + i)), out + i);
#endif
  for (; i < n; ++i) out[i] = FloatToBFloat16(in[i]);
}

void RoundThroughBFloat16(float *x, uint16_t *out, int64_t n) {
  int64_t i = 0;
#if DST_HAVE_F16C
  for (; i + 8 <= n; i += 8) {
    const __m256i lanes = BFloat16Lanes(_mm256_loadu_ps(x + i));
    _mm256_storeu_ps(x + i, _mm256_castsi256_ps(_mm256_slli_epi32(lanes, 16)));
    if (out != nullptr) StoreLanes16(lanes, out + i);
  }
#endif
  for (; i < n; ++i) {
    const uint16_t b = FloatToBFloat16(x[i]);
    x[i] = BFloat16ToFloat(b);
    if (out != nullptr) out[i] = b;
  }
}

void RoundThroughHalf(float *x, uint16_t *out, int64_t n) {
  int64_t i = 0;
#if DST_HAVE_F16C
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
    if (out != nullptr) _mm_storeu_si128(reinterpret_cast<__m128i *>(out + i), h);
  }
#endif
  for (; i < n; ++i) {
    const uint16_t h = FloatToHalf(x[i]);
    x[i] = HalfToFloat(h);
    if (out != nullptr) out[i] = h;
  }
}

}  // namespace dst
