// Point-wise activations and residual adds over flat arrays.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/kernels/cpu/gemm.h"

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

// GeluForward given also out16 [n]: out rounded to bf16 block by block as it
// is written. out may be null: then only the bf16 copy is written (each
// block's values pass through a thread's cache-sized buffer).
inline void GeluForward(const float *x, int64_t n, float *out, uint16_t *out16) {
  if (out16 == nullptr) return GeluForward(x, n, out);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kElementBlock - 1) / kElementBlock; ++b) {
    thread_local std::vector<float> block;
    const int64_t begin = b * kElementBlock, end = std::min(n, begin + kElementBlock);
    if (out == nullptr) block.resize(size_t(kElementBlock));
    float *o = out != nullptr ? out + begin : block.data();
    GeluRange(x + begin, o, 0, end - begin);
    RoundRowToBf16(o, out16 + begin, end - begin);
  }
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
