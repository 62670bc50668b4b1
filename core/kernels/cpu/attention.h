// Causal multi-head self-attention core (after the QKV projection):
//   qkv  [B, T, 3C]  with q = [..., 0:C], k = [..., C:2C], v = [..., 2C:3C],
//        heads of size hs = C / H laid out contiguously inside each of q, k, v;
//   att  [B, H, T, T] softmax(q k^T / sqrt(hs)) with the causal mask (saved);
//   y    [B, T, C]    att v, heads merged.
// Each (b, h) pair is one task; tasks run in parallel, their GEMMs single-threaded
// (OpenMP regions do not nest). `compute`: what the GEMMs multiply in.
#pragma once

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/kernels/cpu/gemm.h"
#include "core/kernels/cpu/vector_math.h"
#include "core/kernels/elementwise_math.h"
#include "core/kernels/kernels.h"

namespace dst::cpu {

using dst::AttentionShape;  // core/kernels/kernels.h

// Row t of a causal score matrix: softmax over columns 0..t, zeros after.
template <typename T>
inline void CausalSoftmaxRow(T *row, int64_t t, int64_t width) {
  T maxv = row[0];
#pragma omp simd reduction(max : maxv)
  for (int64_t j = 1; j <= t; ++j) maxv = row[j] > maxv ? row[j] : maxv;
  const T sum = ExpShiftedAndSum(row, t + 1, maxv);
  const T inv = T(1) / sum;
  for (int64_t j = 0; j <= t; ++j) row[j] *= inv;
  for (int64_t j = t + 1; j < width; ++j) row[j] = T(0);
}

// Row t of the softmax backward, in place on the score gradient dr (masked
// entries stay zero): ds = a (da - <a, da>).
template <typename T>
inline void CausalSoftmaxBackwardRow(const T *ar, T *dr, int64_t t, int64_t width) {
  T dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j <= t; ++j) dot += ar[j] * dr[j];
  for (int64_t j = 0; j <= t; ++j) dr[j] = ar[j] * (dr[j] - dot);
  for (int64_t j = t + 1; j < width; ++j) dr[j] = T(0);
}

// The bf16 backward's GEMMs skip the masked blocks: query rows in blocks of
// kCausalBlock (rows [r0, r1) need the key columns [0, r1) only), and the
// transposed products by the same blocks of key rows (reached by the query
// rows [r0, T) only); its score-gradient rows are zeroed to the end of their
// block only. Measured at T = 256 (one thread, 100 layers' attention): the
// backward 9-12% faster; the forward blocked the same way was 5-10% slower
// (its two GEMMs whole, as before).
inline constexpr int64_t kCausalBlock = 128;

// bf16 compute (attention_bf16.cc): q, k, v, the probabilities, the output
// gradient and the score gradient each rounded to bf16 once per head, the
// probabilities and score gradient row by row as the softmax writes them;
// the same bits as the generic forms below with ComputeType::kBf16, which
// round each GEMM's operands.
// qkv16, att16: where the caller keeps bf16 copies of qkv and att (a 16-bit
// activation stash: the forward writes them there, rather than in per-thread
// scratch, and the backward reads them; the same values), or null. att may
// be null when att16 is given: the probabilities are then kept in bf16 only
// (each head's scores pass through a thread's [T, T] scratch). qkv may be
// null when qkv16 is given: it holds qkv's copy already (a recomputation
// from the stash).
void AttentionForwardBf16(const float *qkv, const AttentionShape &s, float *att, float *y,
                          uint16_t *qkv16, uint16_t *att16);
void AttentionBackwardBf16(const float *dy, const float *qkv, const uint16_t *qkv16,
                           const float *att, const uint16_t *att16, const AttentionShape &s,
                           float *dqkv, float *scratch);

template <typename T>
void AttentionForward(const T *qkv, const AttentionShape &s, T *att, T *y,
                      ComputeType compute = ComputeType::kFp32, uint16_t *qkv16 = nullptr,
                      uint16_t *att16 = nullptr) {
  if constexpr (std::is_same_v<T, float>)
    if (compute == ComputeType::kBf16) return AttentionForwardBf16(qkv, s, att, y, qkv16, att16);
  (void)qkv16, (void)att16;
  const int64_t hs = s.head_size(), C3 = 3 * s.C;
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    const T *q = qkv + b * s.T * C3 + h * hs;
    const T *k = q + s.C;
    const T *v = q + 2 * s.C;
    T *a = att + bh * s.T * s.T;
    Gemm(compute, false, true, int(s.T), int(s.T), int(hs), scale, q, int(C3), k, int(C3), T(0), a,
         int(s.T));
    for (int64_t t = 0; t < s.T; ++t) CausalSoftmaxRow(a + t * s.T, t, s.T);
    Gemm(compute, false, false, int(s.T), int(hs), int(s.T), T(1), a, int(s.T), v, int(C3), T(0),
         y + b * s.T * s.C + h * hs, int(s.C));
  }
}

// dqkv (assigns): [B, T, 3C]. scratch: [max_threads, T, T].
template <typename T>
void AttentionBackward(const T *dy, const T *qkv, const T *att, const AttentionShape &s, T *dqkv,
                       T *scratch, ComputeType compute = ComputeType::kFp32,
                       const uint16_t *qkv16 = nullptr, const uint16_t *att16 = nullptr) {
  if constexpr (std::is_same_v<T, float>)
    if (compute == ComputeType::kBf16)
      return AttentionBackwardBf16(dy, qkv, qkv16, att, att16, s, dqkv, scratch);
  (void)qkv16, (void)att16;
  const int64_t hs = s.head_size(), C3 = 3 * s.C;
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    const T *q = qkv + b * s.T * C3 + h * hs;
    const T *k = q + s.C;
    const T *v = q + 2 * s.C;
    T *dq = dqkv + b * s.T * C3 + h * hs;
    T *dk = dq + s.C;
    T *dv = dq + 2 * s.C;
    const T *a = att + bh * s.T * s.T;
    const T *g = dy + b * s.T * s.C + h * hs;
    T *dscore = scratch + int64_t(omp_get_thread_num()) * s.T * s.T;
    // d att = dy v^T ; dv = att^T dy
    Gemm(compute, false, true, int(s.T), int(s.T), int(hs), T(1), g, int(s.C), v, int(C3), T(0),
         dscore, int(s.T));
    Gemm(compute, true, false, int(s.T), int(hs), int(s.T), T(1), a, int(s.T), g, int(s.C), T(0),
         dv, int(C3));
    for (int64_t t = 0; t < s.T; ++t)
      CausalSoftmaxBackwardRow(a + t * s.T, dscore + t * s.T, t, s.T);
    // dq = scale ds k ; dk = scale ds^T q
    Gemm(compute, false, false, int(s.T), int(hs), int(s.T), scale, dscore, int(s.T), k, int(C3),
         T(0), dq, int(C3));
    Gemm(compute, true, false, int(s.T), int(hs), int(s.T), scale, dscore, int(s.T), q, int(C3),
         T(0), dk, int(C3));
  }
}

}  // namespace dst::cpu
