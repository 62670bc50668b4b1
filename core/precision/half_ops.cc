#include "core/precision/half_ops.h"

#include <algorithm>

namespace dst {

namespace {
constexpr int64_t kChunk = 1024;  // fp32 staging on the stack per pass
}  // namespace

const char *HalfName(Half h) {
  return h == Half::kFp16 ? "fp16" : "bf16";
}

void ToFloat(Half h, const uint16_t *in, float *out, int64_t n) {
  if (h == Half::kFp16)
    HalfToFloat(in, out, n);
  else
    BFloat16ToFloat(in, out, n);
}

void FromFloat(Half h, const float *in, uint16_t *out, int64_t n) {
  if (h == Half::kFp16)
    FloatToHalf(in, out, n);
  else
    FloatToBFloat16(in, out, n);
}

void RoundInPlace(Half h, float *x, int64_t n) {
  FromFloatRounding(h, x, nullptr, n);
}

void FromFloatRounding(Half h, float *x, uint16_t *out, int64_t n) {
  if (h == Half::kFp16)
    RoundThroughHalf(x, out, n);
  else
    RoundThroughBFloat16(x, out, n);
}

void AccumulateInto(Half h, const float *add, uint16_t *acc, int64_t n) {
  float sum[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    ToFloat(h, acc + i, sum, m);
    for (int64_t j = 0; j < m; ++j) sum[j] += add[i + j];
    FromFloat(h, sum, acc + i, m);
  }
}

void Sum16(Half h, uint16_t *x, const uint16_t *y, int64_t n) {
  float a[kChunk], b[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    ToFloat(h, x + i, a, m);
    ToFloat(h, y + i, b, m);
    for (int64_t j = 0; j < m; ++j) a[j] += b[j];
    FromFloat(h, a, x + i, m);
  }
}

double SumOfSquares16(Half h, const uint16_t *x, int64_t n) {
  float a[kChunk];
  double total = 0;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    ToFloat(h, x + i, a, m);
    double part = 0;
    for (int64_t j = 0; j < m; ++j) part += double(a[j]) * double(a[j]);
    total += part;
  }
  return total;
}

}  // namespace dst
