#include "core/precision/half_ops.h"

#include <algorithm>

namespace dst {

namespace {
constexpr int64_t kChunk = 1024;  // fp32 staging on the stack per pass

// A large conversion split over the OpenMP threads in fixed pieces: each
// element is converted on its own, so the bits do not depend on the split.
// (Serial, these passes were what kept bf16 training from scaling with
// threads: the GEMMs and the other kernels are parallel.)
template <typename Body>
void Split(int64_t n, Body body) {
  constexpr int64_t kPiece = int64_t(1) << 14;
  if (n < 4 * kPiece) {
    body(0, n);
    return;
  }
  const int64_t pieces = (n + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < pieces; ++p) body(p * kPiece, std::min(kPiece, n - p * kPiece));
}
}  // namespace

const char *HalfName(Half h) {
  return h == Half::kFp16 ? "fp16" : "bf16";
}

void ToFloat(Half h, const uint16_t *in, float *out, int64_t n) {
  Split(n, [&](int64_t b, int64_t m) {
    if (h == Half::kFp16)
      HalfToFloat(in + b, out + b, m);
    else
      BFloat16ToFloat(in + b, out + b, m);
  });
}

void FromFloat(Half h, const float *in, uint16_t *out, int64_t n) {
  Split(n, [&](int64_t b, int64_t m) {
    if (h == Half::kFp16)
      FloatToHalf(in + b, out + b, m);
    else
      FloatToBFloat16(in + b, out + b, m);
  });
}

void RoundInPlace(Half h, float *x, int64_t n) {
  FromFloatRounding(h, x, nullptr, n);
}

void FromFloatRounding(Half h, float *x, uint16_t *out, int64_t n) {
  Split(n, [&](int64_t b, int64_t m) {
    uint16_t *to = out ? out + b : nullptr;
    if (h == Half::kFp16)
      RoundThroughHalf(x + b, to, m);
    else
      RoundThroughBFloat16(x + b, to, m);
  });
}

void AccumulateInto(Half h, const float *add, uint16_t *acc, int64_t n) {
  Split(n, [&](int64_t b, int64_t count) {
    float sum[kChunk];
    for (int64_t i = b; i < b + count; i += kChunk) {
      const int64_t m = std::min(kChunk, b + count - i);
      ToFloat(h, acc + i, sum, m);
      for (int64_t j = 0; j < m; ++j) sum[j] += add[i + j];
      FromFloat(h, sum, acc + i, m);
    }
  });
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

// Each kChunk-element chunk is summed in order, in double, and the chunk sums
// are added in order: the chunks of a group are summed in parallel and the
// group's sums added serially, so the bits do not depend on the threads.
// A thread sums kLanes chunks side by side (independent chains of additions,
// each still in index order: the same bits, without waiting on one chain's
// latency per element).
double SumOfSquares16(Half h, const uint16_t *x, int64_t n) {
  constexpr int64_t kGroup = 256;  // chunks summed in parallel at a time
  constexpr int64_t kLanes = 4;    // chunks one thread sums side by side
  double total = 0;
  for (int64_t g = 0; g < n; g += kGroup * kChunk) {
    const int64_t chunks = std::min(kGroup, (n - g + kChunk - 1) / kChunk);
    double parts[kGroup];
#pragma omp parallel for schedule(static) if (chunks >= 8)
    for (int64_t c0 = 0; c0 < chunks; c0 += kLanes) {
      const int64_t lanes = std::min(kLanes, chunks - c0);
      float a[kLanes][kChunk];
      int64_t m[kLanes] = {}, common = kChunk;
      for (int64_t l = 0; l < lanes; ++l) {
        const int64_t i = g + (c0 + l) * kChunk;
        m[l] = std::min(kChunk, n - i);
        common = std::min(common, m[l]);
        if (h == Half::kFp16)
          HalfToFloat(x + i, a[l], m[l]);
        else
          BFloat16ToFloat(x + i, a[l], m[l]);
      }
      double part[kLanes] = {};
      if (lanes == kLanes) {
        for (int64_t j = 0; j < common; ++j)
          for (int64_t l = 0; l < kLanes; ++l) part[l] += double(a[l][j]) * double(a[l][j]);
      } else {
        common = 0;
      }
      for (int64_t l = 0; l < lanes; ++l) {
        for (int64_t j = common; j < m[l]; ++j) part[l] += double(a[l][j]) * double(a[l][j]);
        parts[c0 + l] = part[l];
      }
    }
    for (int64_t c = 0; c < chunks; ++c) total += parts[c];
  }
  return total;
}

}  // namespace dst
