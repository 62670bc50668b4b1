// LayerNorm over the last dimension: out = (x - mean) * rstd * weight + bias.
#pragma once

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/kernels/cpu/gemm.h"

namespace dst::cpu {

inline constexpr double kLayerNormEps = 1e-5;

// Row r of LayerNormForward: x [C] of that row -> its output row (out's, or
// a thread's buffer when out is null) and, if out16 is non-null, its bf16
// copy; mean[r], rstd[r].
template <typename T>
inline void LayerNormRow(const T *xr, const T *weight, const T *bias, int64_t r, int64_t C, T *out,
                         uint16_t *out16, T *mean, T *rstd) {
  thread_local std::vector<T> row;  // the row when only its bf16 copy is kept
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < C; ++i) sum += xr[i];
  const T m = sum / T(C);
  T var = 0;
#pragma omp simd reduction(+ : var)
  for (int64_t i = 0; i < C; ++i) var += (xr[i] - m) * (xr[i] - m);
  const T s = T(1) / std::sqrt(var / T(C) + T(kLayerNormEps));
  if (out == nullptr) row.resize(size_t(C));
  T *o = out != nullptr ? out + r * C : row.data();
  for (int64_t i = 0; i < C; ++i) o[i] = (xr[i] - m) * s * weight[i] + bias[i];
  if constexpr (std::is_same_v<T, float>)
    if (out16 != nullptr) RoundRowToBf16(o, out16 + r * C, C);
  mean[r] = m;
  rstd[r] = s;
}

// x, out: [rows, C]; mean, rstd: [rows] (saved for backward). out16 (float
// only; may be null): out rounded to bf16, row by row as it is written; out
// may then be null, and only the bf16 copy is written.
template <typename T>
void LayerNormForward(const T *x, const T *weight, const T *bias, int64_t rows, int64_t C, T *out,
                      T *mean, T *rstd, uint16_t *out16 = nullptr) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    LayerNormRow(x + r * C, weight, bias, r, C, out, out16, mean, rstd);
}

// The residual sum res = a + b [rows, C] (Add's bits), then LayerNormForward
// of res, a row at a time: the sum is normalised while still in cache
// instead of read again in a pass of its own.
template <typename T>
void AddLayerNormForward(const T *a, const T *b, T *res, const T *weight, const T *bias,
                         int64_t rows, int64_t C, T *out, T *mean, T *rstd,
                         uint16_t *out16 = nullptr) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    T *xr = res + r * C;
    for (int64_t i = 0; i < C; ++i) xr[i] = a[r * C + i] + b[r * C + i];
    LayerNormRow(static_cast<const T *>(xr), weight, bias, r, C, out, out16, mean, rstd);
  }
}

// Adds the per-thread partial sums [threads][dw C | db C] into dweight, dbias.
template <typename T>
inline void LayerNormSumPartials(const T *scratch, int threads, int64_t C, T *dweight, T *dbias) {
  for (int t = 0; t < threads; ++t) {
    const T *dw = scratch + int64_t(t) * 2 * C;
    for (int64_t i = 0; i < C; ++i) {
      dweight[i] += dw[i];
      dbias[i] += dw[C + i];
    }
  }
}

// The normalised input of row r, element i.
template <typename T>
inline T LayerNormNorm(const T *xr, T m, T s, int64_t i) {
  return (xr[i] - m) * s;
}

// The weight half of LayerNormBackward: dweight, dbias (+=) [C]. scratch:
// [threads, 2C] zeroed here, used for per-thread partial sums (fixed
// reduction order, so results do not depend on scheduling).
template <typename T>
void LayerNormParamBackward(const T *dout, const T *x, const T *mean, const T *rstd, int64_t rows,
                            int64_t C, T *dweight, T *dbias, T *scratch, int max_threads) {
  for (int64_t i = 0; i < int64_t(max_threads) * 2 * C; ++i) scratch[i] = 0;
  int used_threads = 1;
#pragma omp parallel num_threads(max_threads)
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
#pragma omp single
    used_threads = nth;
    T *dw = scratch + int64_t(tid) * 2 * C;
    T *db = dw + C;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * C;
      const T *g = dout + r * C;
      const T m = mean[r], s = rstd[r];
      for (int64_t i = 0; i < C; ++i) {
        dw[i] += g[i] * LayerNormNorm(xr, m, s, i);
        db[i] += g[i];
      }
    }
  }
  LayerNormSumPartials(scratch, used_threads, C, dweight, dbias);
}

// dx (+=): [rows, C]; then, unless dweight and dbias are null (the input
// gradient only), LayerNormParamBackward (dweight, dbias +=).
template <typename T>
void LayerNormBackward(const T *dout, const T *x, const T *weight, const T *mean, const T *rstd,
                       int64_t rows, int64_t C, T *dx, T *dweight, T *dbias, T *scratch,
                       int max_threads) {
#pragma omp parallel for schedule(static) num_threads(max_threads)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * C;
    const T *g = dout + r * C;
    const T m = mean[r], s = rstd[r];
    T dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (int64_t i = 0; i < C; ++i) {
      const T norm = LayerNormNorm(xr, m, s, i);
      const T dnorm = g[i] * weight[i];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= T(C);
    dnorm_norm_mean /= T(C);
    T *dxr = dx + r * C;
    for (int64_t i = 0; i < C; ++i) {
      const T norm = LayerNormNorm(xr, m, s, i);
      const T dnorm = g[i] * weight[i];
      dxr[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
  if (dweight)
    LayerNormParamBackward(dout, x, mean, rstd, rows, C, dweight, dbias, scratch, max_threads);
}

}  // namespace dst::cpu
