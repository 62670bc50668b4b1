// Causal multi-head self-attention core (after the QKV projection), in the
// layouts AttentionShape (core/kernels/kernels.h) names:
//   qkv  [B, T, W]  W = s.width(): the query, key and value heads of each row
//        (blocked [q | k | v], or BLOOM's interleaved [q k v] per head);
//   att  [B, H, T, T] softmax(q k^T / sqrt(hs) + ALiBi) with the causal mask (saved);
//   y    [B, T, C]    att v, heads merged.
// Grouped-query attention: query head h reads key/value head s.group(h).
// The forward runs one (b, h) pair per task; the backward one (b, key/value
// head) per task, the group's query heads in order, each adding its part of
// the key and value gradients. Tasks run in parallel, their GEMMs
// single-threaded (OpenMP regions do not nest). `compute`: what the GEMMs
// multiply in.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

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

// ALiBi: the scores of row t of query head h (this call's) get
// slope x key position added, j = 0..t (BLOOM's bias; a no-op without ALiBi).
inline float AlibiSlopeOf(const AttentionShape &s, int64_t h) {
  return s.alibi_heads > 0 ? math::AlibiSlope(s.first_head + h, s.alibi_heads) : 0.0f;
}
template <typename T>
inline void AddAlibiRow(T *row, int64_t t, float slope) {
  if (slope == 0.0f) return;
  // A 32-bit position: AVX2 converts 32-bit integers to float 8 at a time
  // but 64-bit ones only one at a time, which left this loop scalar.
  const int32_t n = int32_t(t + 1);
  for (int32_t j = 0; j < n; ++j) row[j] += T(slope * float(j));
}

// The GEMMs skip the masked blocks: query rows in blocks of kCausalBlock
// (rows [r0, r1) need the key columns [0, r1) only), and the backward's
// transposed products by the same blocks of key rows (reached by the query
// rows [r0, T) only); its score-gradient rows are zeroed to the end of their
// block only. Measured at T = 256: in bf16 (one thread, 100 layers'
// attention) the backward 9-12% faster, the forward blocked the same way
// 5-10% slower (its two GEMMs whole); in fp32 (bench_gpt.py's LLaMA, two
// threads) both halves blocked, the training step 3-4% faster.
inline constexpr int64_t kCausalBlock = 128;

// The end of row r's causal block (kCausalBlock).
inline int64_t CausalBlockEnd(int64_t r, int64_t T) {
  return std::min(T, (r / kCausalBlock + 1) * kCausalBlock);
}

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
  const int64_t hs = s.head_size(), W = s.width();
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H, g = s.group(h);
    const T *row0 = qkv + b * s.T * W;
    const T *q = row0 + s.q_offset(h);
    const T *k = row0 + s.k_offset(g);
    const T *v = row0 + s.v_offset(g);
    T *a = att + bh * s.T * s.T;
    const float slope = AlibiSlopeOf(s, h);
    for (int64_t r0 = 0; r0 < s.T; r0 += kCausalBlock) {
      const int64_t r1 = CausalBlockEnd(r0, s.T);
      Gemm(compute, false, true, int(r1 - r0), int(r1), int(hs), scale, q + r0 * W, int(W), k,
           int(W), T(0), a + r0 * s.T, int(s.T));
    }
    for (int64_t t = 0; t < s.T; ++t) {
      AddAlibiRow(a + t * s.T, t, slope);
      CausalSoftmaxRow(a + t * s.T, t, s.T);
    }
    for (int64_t r0 = 0; r0 < s.T; r0 += kCausalBlock) {
      const int64_t r1 = CausalBlockEnd(r0, s.T);
      Gemm(compute, false, false, int(r1 - r0), int(hs), int(r1), T(1), a + r0 * s.T, int(s.T), v,
           int(W), T(0), y + (b * s.T + r0) * s.C + h * hs, int(s.C));
    }
  }
}

// dqkv (assigns): [B, T, W]. scratch: [max_threads, T, T]. The GEMMs skip
// the masked blocks as the bf16 form does (kCausalBlock): the score
// gradient's rows [r0, r1) are computed over the key columns [0, r1) only,
// and the transposed products read the query rows [r0, T) only.
template <typename T>
void AttentionBackward(const T *dy, const T *qkv, const T *att, const AttentionShape &s, T *dqkv,
                       T *scratch, ComputeType compute = ComputeType::kFp32,
                       const uint16_t *qkv16 = nullptr, const uint16_t *att16 = nullptr) {
  if constexpr (std::is_same_v<T, float>)
    if (compute == ComputeType::kBf16)
      return AttentionBackwardBf16(dy, qkv, qkv16, att, att16, s, dqkv, scratch);
  (void)qkv16, (void)att16;
  const int64_t hs = s.head_size(), W = s.width(), kv = s.kv(), rep = s.group_size();
  const int t = int(s.T), d = int(hs), w = int(W), c = int(s.C);
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for schedule(static)
  for (int64_t bg = 0; bg < s.B * kv; ++bg) {
    const int64_t b = bg / kv, g = bg % kv;
    const T *row0 = qkv + b * s.T * W;
    T *drow0 = dqkv + b * s.T * W;
    const T *k = row0 + s.k_offset(g);
    const T *v = row0 + s.v_offset(g);
    T *dk = drow0 + s.k_offset(g);
    T *dv = drow0 + s.v_offset(g);
    T *dscore = scratch + int64_t(omp_get_thread_num()) * s.T * s.T;
    for (int64_t h = g * rep; h < (g + 1) * rep; ++h) {
      const T *q = row0 + s.q_offset(h);
      T *dq = drow0 + s.q_offset(h);
      const T *a = att + (b * s.H + h) * s.T * s.T;
      const T *gy = dy + b * s.T * s.C + h * hs;
      const T acc = h == g * rep ? T(0) : T(1);  // the group's later heads add to dk, dv
      for (int64_t r0 = 0; r0 < s.T; r0 += kCausalBlock) {
        const int64_t r1 = CausalBlockEnd(r0, s.T), n = r1 - r0, rest = s.T - r0;
        // d att [r0, r1) x [0, r1) = dy v^T ; dv[r0:r1] (+)= att[r0:T, r0:r1]^T dy[r0:T]
        Gemm(compute, false, true, int(n), int(r1), d, T(1), gy + r0 * s.C, c, v, w, T(0),
             dscore + r0 * s.T, t);
        Gemm(compute, true, false, int(n), d, int(rest), T(1), a + r0 * s.T + r0, t, gy + r0 * s.C,
             c, acc, dv + r0 * W, w);
      }
      for (int64_t r = 0; r < s.T; ++r)
        CausalSoftmaxBackwardRow(a + r * s.T, dscore + r * s.T, r, CausalBlockEnd(r, s.T));
      for (int64_t r0 = 0; r0 < s.T; r0 += kCausalBlock) {
        const int64_t r1 = CausalBlockEnd(r0, s.T), n = r1 - r0, rest = s.T - r0;
        // dq[r0:r1] = scale ds[r0:r1, 0:r1] k[0:r1] ; dk[r0:r1] (+)= scale ds[r0:T, r0:r1]^T
        // q[r0:T]
        Gemm(compute, false, false, int(n), d, int(r1), scale, dscore + r0 * s.T, t, k, w, T(0),
             dq + r0 * W, w);
        Gemm(compute, true, false, int(n), d, int(rest), scale, dscore + r0 * s.T + r0, t,
             q + r0 * W, w, acc, dk + r0 * W, w);
      }
    }
  }
}

// Generation (Kernels::AttentionCached): the new rows' keys and values into
// the cache, then per (b, h) task the scores of the new rows against the
// cached keys [T, L] (L = s.position + T) by one GEMM, each row's causal
// softmax up to its own position, and the values' GEMM: the forward's
// computation with the keys and values read from the cache.
template <typename T>
void AttentionCached(const T *qkv, const AttentionShape &s, const KvCacheView<T> &cache, T *y,
                     ComputeType compute = ComputeType::kFp32) {
  const int64_t hs = s.head_size(), W = s.width(), kv = s.kv(), L = s.position + s.T;
  const int64_t cap = cache.capacity;
#pragma omp parallel for schedule(static)
  for (int64_t bg = 0; bg < s.B * kv; ++bg) {
    const int64_t b = bg / kv, g = bg % kv;
    T *kc = cache.k + bg * cap * hs, *vc = cache.v + bg * cap * hs;
    for (int64_t t = 0; t < s.T; ++t) {
      const T *row = qkv + (b * s.T + t) * W;
      std::copy(row + s.k_offset(g), row + s.k_offset(g) + hs, kc + (s.position + t) * hs);
      std::copy(row + s.v_offset(g), row + s.v_offset(g) + hs, vc + (s.position + t) * hs);
    }
  }
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H, g = s.group(h);
    thread_local std::vector<T> scores;
    scores.resize(size_t(s.T * L));
    T *a = scores.data();
    const T *q = qkv + b * s.T * W + s.q_offset(h);
    const T *kc = cache.k + (b * kv + g) * cap * hs, *vc = cache.v + (b * kv + g) * cap * hs;
    const float slope = AlibiSlopeOf(s, h);
    Gemm(compute, false, true, int(s.T), int(L), int(hs), scale, q, int(W), kc, int(hs), T(0), a,
         int(L));
    for (int64_t t = 0; t < s.T; ++t) {
      AddAlibiRow(a + t * L, s.position + t, slope);
      CausalSoftmaxRow(a + t * L, s.position + t, L);
    }
    Gemm(compute, false, false, int(s.T), int(hs), int(L), T(1), a, int(L), vc, int(hs), T(0),
         y + b * s.T * s.C + h * hs, int(s.C));
  }
}

}  // namespace dst::cpu
