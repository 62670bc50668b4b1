#include "core/precision/half_ops.h"

#include <algorithm>

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#endif

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

namespace {
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
// 8 values of each of 8 rows (as fp32) transposed: r[k] holds value k of
// rows 0..7.
void Transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// Eight 16-bit values from p, widened to fp32 (exact).
__m256 Load8(Half h, const uint16_t *p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
  if (h == Half::kFp16) return _mm256_cvtph_ps(v);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

// part[l] = the sum over j < m of x[l * stride + j]^2, in double, in index
// order: eight chains side by side, one per vector lane (a square of an
// fp32 value is exact in double, so a fused multiply-add rounds as the
// scalar loop's add does: the same bits). m is a multiple of 8.
void SquaresOf8Rows(Half h, const uint16_t *x, int64_t stride, int64_t m, double part[8]) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();  // rows 0-3, 4-7
  for (int64_t j = 0; j < m; j += 8) {
    __m256 r[8];
    for (int l = 0; l < 8; ++l) r[l] = Load8(h, x + l * stride + j);
    Transpose8x8(r);
    for (int k = 0; k < 8; ++k) {
      const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(r[k]));
      const __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(r[k], 1));
      lo = _mm256_fmadd_pd(a, a, lo);
      hi = _mm256_fmadd_pd(b, b, hi);
    }
  }
  _mm256_storeu_pd(part, lo);
  _mm256_storeu_pd(part + 4, hi);
}
constexpr bool kVectorSquares = true;
#else
void SquaresOf8Rows(Half, const uint16_t *, int64_t, int64_t, double *) {}
constexpr bool kVectorSquares = false;
#endif
}  // namespace

// Each kChunk-element chunk is summed in order, in double, and the chunk sums
// are added in order: the chunks of a group are summed in parallel and the
// group's sums added serially, so the bits do not depend on the threads.
// A thread sums kLanes chunks side by side (independent chains of additions,
// each still in index order: the same bits, without waiting on one chain's
// latency per element), in AVX2 vector lanes when the chunks are whole.
double SumOfSquares16(Half h, const uint16_t *x, int64_t n) {
  constexpr int64_t kGroup = 256;  // chunks summed in parallel at a time
  constexpr int64_t kLanes = 8;    // chunks one thread sums side by side
  double total = 0;
  for (int64_t g = 0; g < n; g += kGroup * kChunk) {
    const int64_t chunks = std::min(kGroup, (n - g + kChunk - 1) / kChunk);
    double parts[kGroup];
#pragma omp parallel for schedule(static) if (chunks >= 8)
    for (int64_t c0 = 0; c0 < chunks; c0 += kLanes) {
      const int64_t lanes = std::min(kLanes, chunks - c0);
      const int64_t first = g + c0 * kChunk;
      if (kVectorSquares && lanes == kLanes && n - first >= kLanes * kChunk) {
        SquaresOf8Rows(h, x + first, kChunk, kChunk, parts + c0);
        continue;
      }
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
