// Point-wise activations and residual adds over flat arrays.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/kernels/cpu/vector_math.h"
#include "core/kernels/elementwise_math.h"

namespace dst::cpu {

// Elementwise loops run in blocks of kBlock elements, one block per task.
inline constexpr int64_t kElementBlock = 16384;

template <typename T>
void GeluForward(const T *x, int64_t n, T *out) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kElementBlock - 1) / kElementBlock; ++b)
    GeluRange(x, out, b * kElementBlock, std::min(n, (b + 1) * kElementBlock));
}

// dx = dout * gelu'(x)  (assigns; dx may alias dout).
template <typename T>
void GeluBackward(const T *dout, const T *x, int64_t n, T *dx) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kElementBlock - 1) / kElementBlock; ++b)
    GeluGradRange(dout, x, dx, b * kElementBlock, std::min(n, (b + 1) * kElementBlock));
}

template <typename T>
void ReluForward(const T *x, int64_t n, T *out) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] > T(0) ? x[i] : T(0);
}

// dx = dout where x > 0 (assigns).
template <typename T>
void ReluBackward(const T *dout, const T *x, int64_t n, T *dx) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > T(0) ? dout[i] : T(0);
}

// out = a + b.
template <typename T>
void Add(const T *a, const T *b, int64_t n, T *out) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// y += x.
template <typename T>
void AddInPlace(const T *x, int64_t n, T *y) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace dst::cpu
