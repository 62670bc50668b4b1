// RMSNorm over the last dimension (LLaMA's, as Hugging Face's LlamaRMSNorm
// computes it in fp32): out = weight * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps).
// No mean and no bias; rstd is saved for the backward.
#pragma once

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/kernels/cpu/gemm.h"

namespace dst::cpu {

// Row r: x [C] -> its output row (out's, or a thread's buffer when out is
// null) and, if out16 is non-null, its bf16 copy; rstd[r].
template <typename T>
inline void RmsNormRow(const T *xr, const T *weight, int64_t r, int64_t C, double eps, T *out,
                       uint16_t *out16, T *rstd) {
  thread_local std::vector<T> row;  // the row when only its bf16 copy is kept
  T squares = 0;
#pragma omp simd reduction(+ : squares)
  for (int64_t i = 0; i < C; ++i) squares += xr[i] * xr[i];
  const T s = T(1) / std::sqrt(squares / T(C) + T(eps));
  if (out == nullptr) row.resize(size_t(C));
  T *o = out != nullptr ? out + r * C : row.data();
  for (int64_t i = 0; i < C; ++i) o[i] = weight[i] * (xr[i] * s);
  if constexpr (std::is_same_v<T, float>)
    if (out16 != nullptr) RoundRowToBf16(o, out16 + r * C, C);
  rstd[r] = s;
}

// x, out: [rows, C]; rstd: [rows]. out16 (float only; may be null): out
// rounded to bf16 row by row; out may then be null (only the copy written).
template <typename T>
void RmsNormForward(const T *x, const T *weight, int64_t rows, int64_t C, double eps, T *out,
                    T *rstd, uint16_t *out16 = nullptr) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) RmsNormRow(x + r * C, weight, r, C, eps, out, out16, rstd);
}

// The residual sum res = a + b [rows, C], then RmsNormForward of res, a row
// at a time (the sum normalised while in cache).
template <typename T>
void AddRmsNormForward(const T *a, const T *b, T *res, const T *weight, int64_t rows, int64_t C,
                       double eps, T *out, T *rstd, uint16_t *out16 = nullptr) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    T *xr = res + r * C;
    for (int64_t i = 0; i < C; ++i) xr[i] = a[r * C + i] + b[r * C + i];
    RmsNormRow(static_cast<const T *>(xr), weight, r, C, eps, out, out16, rstd);
  }
}

// The weight half: dweight (+=) [C] = sum over rows of dout * x * rstd.
// scratch: [threads, C], per-thread partial sums added in thread order.
template <typename T>
void RmsNormParamBackward(const T *dout, const T *x, const T *rstd, int64_t rows, int64_t C,
                          T *dweight, T *scratch, int max_threads) {
  for (int64_t i = 0; i < int64_t(max_threads) * C; ++i) scratch[i] = 0;
  int used_threads = 1;
#pragma omp parallel num_threads(max_threads)
  {
    const int tid = omp_get_thread_num();
#pragma omp single
    used_threads = omp_get_num_threads();
    T *dw = scratch + int64_t(tid) * C;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * C;
      const T *g = dout + r * C;
      const T s = rstd[r];
      for (int64_t i = 0; i < C; ++i) dw[i] += g[i] * (xr[i] * s);
    }
  }
  for (int t = 0; t < used_threads; ++t)
    for (int64_t i = 0; i < C; ++i) dweight[i] += scratch[int64_t(t) * C + i];
}

// dx (+=) [rows, C]: with n = x rstd and dn = dout * weight,
// dx = rstd (dn - n mean(dn n)); then, unless dweight is null, RmsNormParamBackward.
template <typename T>
void RmsNormBackward(const T *dout, const T *x, const T *weight, const T *rstd, int64_t rows,
                     int64_t C, T *dx, T *dweight, T *scratch, int max_threads) {
#pragma omp parallel for schedule(static) num_threads(max_threads)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * C;
    const T *g = dout + r * C;
    const T s = rstd[r];
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t i = 0; i < C; ++i) dot += g[i] * weight[i] * (xr[i] * s);
    dot /= T(C);
    T *dxr = dx + r * C;
    for (int64_t i = 0; i < C; ++i) dxr[i] += (g[i] * weight[i] - xr[i] * s * dot) * s;
  }
  if (dweight) RmsNormParamBackward(dout, x, rstd, rows, C, dweight, scratch, max_threads);
}

}  // namespace dst::cpu
