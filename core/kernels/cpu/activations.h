// Point-wise activations and residual adds over flat arrays.
#pragma once

#include <cstdint>

#include "core/kernels/elementwise_math.h"

namespace dst::cpu {

template <typename T>
void GeluForward(const T *x, int64_t n, T *out) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = math::Gelu(x[i]);
}

// dx = dout * gelu'(x)  (assigns).
template <typename T>
void GeluBackward(const T *dout, const T *x, int64_t n, T *dx) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = dout[i] * math::GeluGrad(x[i]);
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
