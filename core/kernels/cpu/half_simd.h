// 16-bit conversions of float vectors for the CPU optimizers' vector paths
// (CPU-Adam, CPU-Lamb): bf16 rounded to nearest even with NaN quieted, as
// FloatToBFloat16 does one at a time.
#pragma once

// GCC 12's AVX-512 headers start intrinsics from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports at every use (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "core/precision/half_ops.h"

namespace dst::cpu::simd {

// bf16 round-to-nearest-even of 8 floats (NaN quieted), as FloatToBFloat16.
__attribute__((target("avx2"))) inline __m128i Bf16x8(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
  const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x400000));
  const __m256i out = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
  // Pack the low 16 bits of each lane (values < 2^16: no saturation).
  const __m128i lo = _mm256_castsi256_si128(out), hi = _mm256_extracti128_si256(out, 1);
  return _mm_packus_epi32(lo, hi);
}

// bf16 of 16 floats, as Bf16x8.
__attribute__((target("avx512f"))) inline __m256i Bf16x16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7F800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
  const __m512i quiet = _mm512_or_si512(bits, _mm512_set1_epi32(0x400000));
  const __m512i out = _mm512_srli_epi32(_mm512_mask_blend_epi32(nan, rounded, quiet), 16);
  return _mm512_cvtepi32_epi16(out);
}

// 8 / 16 floats stored as `h` (bf16 as above, fp16 rounded to nearest).
__attribute__((target("avx2,f16c"))) inline void StoreHalf8(Half h, __m256 x, uint16_t *out) {
  const __m128i v = h == Half::kBf16 ? Bf16x8(x) : _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(out), v);
}
__attribute__((target("avx512f"))) inline void StoreHalf16(Half h, __m512 x, uint16_t *out) {
  const __m256i v = h == Half::kBf16 ? Bf16x16(x) : _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(out), v);
}

}  // namespace dst::cpu::simd

#pragma GCC diagnostic pop
