// Point-wise activations and residual adds over flat arrays.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/kernels/cpu/gemm.h"
#include "core/kernels/cpu/vector_math.h"
#include "core/kernels/elementwise_math.h"
#include "core/precision/convert.h"

namespace dst::cpu {

// Elementwise loops run in blocks of kBlock elements, one block per task.
inline constexpr int64_t kElementBlock = 16384;

template <typename T>
void GeluForward(const T *x, int64_t n, T *out) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kElementBlock - 1) / kElementBlock; ++b)
    GeluRange(x, out, b * kElementBlock, std::min(n, (b + 1) * kElementBlock));
}

// A thread's cache-sized buffer of one element block's fp32 values.
inline float *BlockBuffer() {
  thread_local std::vector<float> block(static_cast<size_t>(kElementBlock));
  return block.data();
}

// GeluForward given also out16 and x16 [n] (each may be null): out and x
// rounded to bf16 block by block, while the block is in cache. out may be
// null when out16 is given: then only the bf16 copy is written (each block's
// values pass through a thread's buffer).
inline void GeluForward(const float *x, int64_t n, float *out, uint16_t *out16,
                        uint16_t *x16 = nullptr) {
  if (out16 == nullptr && x16 == nullptr) return GeluForward(x, n, out);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kElementBlock - 1) / kElementBlock; ++b) {
    const int64_t begin = b * kElementBlock, end = std::min(n, begin + kElementBlock);
    float *o = out != nullptr ? out + begin : BlockBuffer();
    GeluRange(x + begin, o, 0, end - begin);
    if (out16 != nullptr) RoundRowToBf16(o, out16 + begin, end - begin);
    if (x16 != nullptr) RoundRowToBf16(x + begin, x16 + begin, end - begin);
  }
}

// dx = dout * gelu'(x)  (assigns; dx may alias dout).
template <typename T>
void GeluBackward(const T *dout, const T *x, int64_t n, T *dx) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kElementBlock - 1) / kElementBlock; ++b)
    GeluGradRange(dout, x, dx, b * kElementBlock, std::min(n, (b + 1) * kElementBlock));
}

// gelu'(x) for every bf16 value x, indexed by its bits (256 KiB), made once
// by GeluGradRange itself. A bf16 stash holds at most 65536 distinct inputs,
// so its gradient is dout * table[x16]: the bits GeluGradRange gives for the
// widened value (its dx is dout * gelu'(x), gelu'(x) times 1 exactly here),
// for a load instead of a tanh — the costliest step of bf16 training's GELU
// backward.
inline const float *GeluGradOfBf16() {
  static const std::vector<float> table = [] {
    constexpr int64_t kValues = int64_t(1) << 16;
    std::vector<float> x(kValues), ones(kValues, 1.0f), grad(kValues);
    for (int64_t b = 0; b < kValues; ++b) x[size_t(b)] = BFloat16ToFloat(uint16_t(b));
    GeluGradRange(ones.data(), x.data(), grad.data(), 0, kValues);
    return grad;
  }();
  return table.data();
}

// dx[i] = dout[i] * gelu'(x16[i]) for i in [0, n) (dx may alias dout):
// GeluGradRange's bits on x16 widened. Its vector lanes are the table's
// values; the last n % 8 take its scalar formula (equal to them only to
// roundoff), so they are computed as it computes them.
inline void GeluGradOf16(const float *dout, const uint16_t *x16, float *dx, int64_t n) {
  const int64_t lanes = n - n % 8;
  TableProduct(dout, x16, GeluGradOfBf16(), dx, lanes);
  float tail[8];
  BFloat16ToFloat(x16 + lanes, tail, n - lanes);
  GeluGradRange(dout + lanes, tail, dx + lanes, 0, n - lanes);
}

// GeluBackward reading x's bf16 copy x16 when given (x is not read then).
inline void GeluBackward(const float *dout, const float *x, const uint16_t *x16, int64_t n,
                         float *dx) {
  if (x16 == nullptr) return GeluBackward(dout, x, n, dx);
  GeluGradOfBf16();  // made before the threads start
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kElementBlock - 1) / kElementBlock; ++b) {
    const int64_t begin = b * kElementBlock, end = std::min(n, begin + kElementBlock);
    GeluGradOf16(dout + begin, x16 + begin, dx + begin, end - begin);
  }
}

// The gated MLP's activation (SwiGLU): out = silu(gate) * up [n]. out16
// (float; may be null): out rounded to bf16 block by block; out may then be
// null (only the copy written).
template <typename T>
void SiluMulForward(const T *gate, const T *up, int64_t n, T *out, uint16_t *out16 = nullptr) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kElementBlock - 1) / kElementBlock; ++b) {
    const int64_t begin = b * kElementBlock, end = std::min(n, begin + kElementBlock);
    T *o = out != nullptr ? out + begin : nullptr;
    if constexpr (std::is_same_v<T, float>)
      if (o == nullptr) o = BlockBuffer();
    SiluMulRange(gate, up, o, begin, end);
    if constexpr (std::is_same_v<T, float>)
      if (out16 != nullptr) RoundRowToBf16(o, out16 + begin, end - begin);
  }
}

// dgate = dout * up * silu'(gate), dup = dout * silu(gate) (assign; either
// may alias dout, not both).
template <typename T>
void SiluMulBackward(const T *dout, const T *gate, const T *up, int64_t n, T *dgate, T *dup) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kElementBlock - 1) / kElementBlock; ++b)
    SiluMulGradRange(dout, gate, up, dgate, dup, b * kElementBlock,
                     std::min(n, (b + 1) * kElementBlock));
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
