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

// GeluBackward reading x's bf16 copy x16 when given (x is not read then),
// widened block by block into a thread's buffer.
inline void GeluBackward(const float *dout, const float *x, const uint16_t *x16, int64_t n,
                         float *dx) {
  if (x16 == nullptr) return GeluBackward(dout, x, n, dx);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kElementBlock - 1) / kElementBlock; ++b) {
    const int64_t begin = b * kElementBlock, end = std::min(n, begin + kElementBlock);
    float *wide = BlockBuffer();
    BFloat16ToFloat(x16 + begin, wide, end - begin);
    GeluGradRange(dout + begin, wide, dx + begin, 0, end - begin);
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
