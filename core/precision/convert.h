// 16-bit floating-point storage formats and their conversions to and from
// fp32, round-to-nearest-even, NaN preserved (quieted), overflow to infinity.
// On CPU, dstrain computes in fp32 on 16-bit data; these are the only places
// where precision is lost. Scalar forms are DST_HOST_DEVICE (shared with a
// future CUDA path); the array forms use F16C for fp16 and AVX2 for bf16.
#pragma once

#include <cstdint>

#include "core/common/host_device.h"

namespace dst {

// __builtin_bit_cast is std::bit_cast (GCC's own spelling of it), also in nvcc's C++17.

// IEEE binary16 <-> binary32.
DST_HOST_DEVICE inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return __builtin_bit_cast(float, sign | 0x7F800000u | (mant << 13));  // inf/nan
  if (exp != 0) return __builtin_bit_cast(float, sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return __builtin_bit_cast(float, sign);  // +-0
  // Subnormal half: normalise into a float.
  int e = -1;
  do {
    ++e;
    mant <<= 1;
  } while ((mant & 0x400u) == 0);
  return __builtin_bit_cast(float, sign | uint32_t(112 - e) << 23 | ((mant & 0x3FFu) << 13));
}

DST_HOST_DEVICE inline uint16_t FloatToHalf(float f) {
  const uint32_t x = __builtin_bit_cast(uint32_t, f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));  // NaN
  if (abs >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (abs >= 0x38800000u) {                                 // normal half
    const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
    return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
  }
  // Subnormal (or zero) half: value = abs_float * 2^24 in units of 2^-24.
  const float scaled = __builtin_bit_cast(float, abs) * 16777216.0f;  // exact: power of two
  // Round half to even on the integer part.
  const uint32_t i = uint32_t(scaled);
  const float frac = scaled - float(i);
  const uint32_t r = i + ((frac > 0.5f || (frac == 0.5f && (i & 1u))) ? 1u : 0u);
  return uint16_t(sign | r);
}

// bfloat16 <-> binary32: bf16 is the top half of a float.
DST_HOST_DEVICE inline float BFloat16ToFloat(uint16_t b) {
  return __builtin_bit_cast(float, uint32_t(b) << 16);
}

DST_HOST_DEVICE inline uint16_t FloatToBFloat16(float f) {
  const uint32_t x = __builtin_bit_cast(uint32_t, f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounded = x + 0x7FFFu + ((x >> 16) & 1u);
  return uint16_t(rounded >> 16);
}

// Array conversions (n elements).
void HalfToFloat(const uint16_t *in, float *out, int64_t n);
void FloatToHalf(const float *in, uint16_t *out, int64_t n);
void BFloat16ToFloat(const uint16_t *in, float *out, int64_t n);
void FloatToBFloat16(const float *in, uint16_t *out, int64_t n);

// x[i] onto the 16-bit grid in place, in one pass: x[i] = ToFloat(From(x[i])),
// the same bits as the two conversions; with `out`, the 16-bit values are
// stored there too (what a 16-bit activation stash keeps).
void RoundThroughHalf(float *x, uint16_t *out, int64_t n);
void RoundThroughBFloat16(float *x, uint16_t *out, int64_t n);

}  // namespace dst
