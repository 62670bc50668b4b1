// Rotary position embeddings (RoPE) in Hugging Face's rotate_half layout:
// in a head of hs values, pair i is (i, i + hs/2), rotated by the angle
// t * inv_freq(i) of the row's position t:
//   out_i        = x_i cos - x_{i+hs/2} sin
//   out_{i+hs/2} = x_{i+hs/2} cos + x_i sin.
// Applied in place to the query and key heads of a packed qkv tensor (the
// attention core's input, AttentionShape's layout); the backward is the
// rotation by the opposite angle, applied to their gradients.
#pragma once

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/kernels/elementwise_math.h"
#include "core/kernels/kernels.h"

namespace dst::cpu {

// cos and sin [T, hs/2] of every position and pair, in float as
// transformers computes them (the angle t * inv_freq rounded to float first).
inline void RotaryTable(const math::RopeParams &rope, int64_t T, int64_t hs, std::vector<float> *cos,
                        std::vector<float> *sin) {
  const int64_t half = hs / 2;
  cos->resize(size_t(T * half));
  sin->resize(size_t(T * half));
  for (int64_t i = 0; i < half; ++i) {
    const float inv = math::RopeInvFreq(rope, i, hs);
    for (int64_t t = 0; t < T; ++t) {
      const float angle = float(t) * inv;
      (*cos)[size_t(t * half + i)] = std::cos(angle);
      (*sin)[size_t(t * half + i)] = std::sin(angle);
    }
  }
}

// A thread's last RotaryTable and what it was built for: every layer of a
// step rotates the same positions with the same frequencies, so the table is
// computed once instead of per layer, per pass (cos and sin were a visible
// share of a small LLaMA's step).
struct RotaryTableCache {
  int64_t T = -1, hs = -1;
  math::RopeParams rope;
  std::vector<float> cos, sin;

  // Rows beyond t do not change the first t rows: a longer table holds.
  bool Holds(const math::RopeParams &r, int64_t t, int64_t h) const {
    return T >= t && hs == h && rope.theta == r.theta && rope.scaling == r.scaling &&
           rope.factor == r.factor && rope.low_freq_factor == r.low_freq_factor &&
           rope.high_freq_factor == r.high_freq_factor &&
           rope.original_max_position == r.original_max_position;
  }
  void Ensure(const math::RopeParams &r, int64_t t, int64_t h) {
    if (Holds(r, t, h)) return;
    // Generation asks for one position more per token: grown geometrically.
    if (hs == h && T > 0 && T < t) t = std::max(t, 2 * T);
    RotaryTable(r, t, h, &cos, &sin);
    T = t, hs = h, rope = r;
  }
};

// One head's hs values rotated by the row's angles (sign -1: the backward).
template <typename T>
inline void RotateHead(T *x, const float *c, const float *s, int64_t half, T sign) {
  for (int64_t i = 0; i < half; ++i) {
    const T a = x[i], b = x[i + half];
    const T cs = T(c[i]), sn = sign * T(s[i]);
    x[i] = a * cs - b * sn;
    x[i + half] = b * cs + a * sn;
  }
}

// qkv [B, T, s.width()]: the query heads and the key heads rotated in place
// by each row's position (row r of a sequence is position s.position + r); `inverse`:
// by the opposite angles (the backward, on the gradient).
template <typename T>
void RotaryForward(T *qkv, const AttentionShape &s, const math::RopeParams &rope, bool inverse) {
  const int64_t hs = s.head_size(), half = hs / 2, width = s.width();
  thread_local RotaryTableCache table;
  table.Ensure(rope, s.position + s.T, hs);
  const float *c = table.cos.data(), *sn = table.sin.data();
  const T sign = inverse ? T(-1) : T(1);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < s.B * s.T; ++r) {
    const int64_t t = s.position + r % s.T;
    T *row = qkv + r * width;
    for (int64_t h = 0; h < s.H; ++h)
      RotateHead(row + s.q_offset(h), c + t * half, sn + t * half, half, sign);
    for (int64_t g = 0; g < s.kv(); ++g)
      RotateHead(row + s.k_offset(g), c + t * half, sn + t * half, half, sign);
  }
}

}  // namespace dst::cpu
