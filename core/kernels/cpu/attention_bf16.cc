// Causal self-attention with bf16 GEMMs (attention.h's kBf16 forms): qkv and
// the output gradient are rounded to bf16 once per layer, each head's
// probabilities and score gradient once per (batch, head) task, and every
// GEMM reads those copies.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/gemm.h"
#include "core/precision/convert.h"

namespace dst::cpu {

namespace {

// One thread's bf16 copies of a head's [T, T] matrices (grown once, then reused).
struct HeadScratch {
  std::vector<uint16_t> p;    // probabilities [T, T]
  std::vector<uint16_t> ds;   // score gradient [T, T]
  std::vector<float> row;     // one row of the probabilities, widened [T]
  std::vector<float> scores;  // scores, then probabilities [T, T], when att is not kept
};

HeadScratch &Scratch(int64_t T, bool scores = false) {
  thread_local HeadScratch scratch;
  scratch.p.resize(size_t(T * T));
  scratch.ds.resize(size_t(T * T));
  scratch.row.resize(size_t(T));
  if (scores) scratch.scores.resize(size_t(T * T));
  return scratch;
}

// The whole-layer bf16 copies of qkv [B, T, W] and of the output gradient
// [B, T, C], made in the calling thread before the heads' tasks start: one
// pass over contiguous rows. (A head's slice is hs values of each 3C-wide
// row; rounded one head at a time, those strided reads cost several times
// more.)
struct LayerScratch {
  std::vector<uint16_t> qkv, dy;
};

LayerScratch &Layer() {
  thread_local LayerScratch scratch;
  return scratch;
}

// Row r of a causal [T, T] matrix (probabilities, score gradient) rounded
// into out: its first r + 1 values, then zeros up to `width` (the masked
// entries a GEMM reads: the whole row for the forward's product, the row's
// block for the backward's blocked ones; the softmax and its backward write
// +0 there). Beyond `width` nothing reads the row.
void RoundCausalRow(const float *x, int64_t r, int64_t width, uint16_t *out) {
  RoundRowToBf16(x, out, r + 1);
  std::memset(out + r + 1, 0, size_t(width - r - 1) * sizeof(uint16_t));
}

// A bf16 operand from its row r, column c on.
GemmOperand From(GemmOperand x, int64_t r, int64_t c = 0) {
  return Bf16Operand(x.bf16 + r * x.ld + c, x.ld);
}

// Query head h's bf16 views in the rounded qkv (row stride W), with its
// key/value head's.
struct Head {
  GemmOperand q, k, v;
};

Head HeadOf(const uint16_t *qkv16, const AttentionShape &s, int64_t b, int64_t h) {
  const uint16_t *row0 = qkv16 + b * s.T * s.width();
  const int ld = int(s.width());
  const int64_t g = s.group(h);
  return {Bf16Operand(row0 + s.q_offset(h), ld), Bf16Operand(row0 + s.k_offset(g), ld),
          Bf16Operand(row0 + s.v_offset(g), ld)};
}

}  // namespace

void AttentionForwardBf16(const float *qkv, const AttentionShape &s, float *att, float *y,
                          uint16_t *qkv16, uint16_t *att16) {
  const int64_t hs = s.head_size(), T = s.T, W = s.width();
  const int t = int(T), d = int(hs);
  const float scale = 1.0f / std::sqrt(float(hs));
  if (qkv16 != nullptr) {
    if (qkv != nullptr) RoundToBf16(qkv, s.B * T, W, W, qkv16);  // else written
  } else {
    RoundToBf16(qkv, s.B * T, W, W, Layer().qkv);
    qkv16 = Layer().qkv.data();
  }
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    const Head head = HeadOf(qkv16, s, b, h);
    HeadScratch &x = Scratch(T, att == nullptr);
    float *a = att != nullptr ? att + bh * T * T : x.scores.data();
    uint16_t *p = att16 != nullptr ? att16 + bh * T * T : x.p.data();
    float *yh = y + b * T * s.C + h * hs;
    const float slope = AlibiSlopeOf(s, h);
    // scores [T, T] = scale q k^T (+ ALiBi); softmax row by row, each row rounded as written
    GemmBf16(false, true, t, t, d, scale, head.q, head.k, 0.0f, a, t);
    for (int64_t r = 0; r < T; ++r) {
      AddAlibiRow(a + r * T, r, slope);
      CausalSoftmaxRow(a + r * T, r, T);
      RoundCausalRow(a + r * T, r, T, p + r * T);
    }
    // y[b, :, h] [T, hs] = p v
    GemmBf16(false, false, t, d, t, 1.0f, Bf16Operand(p, t), head.v, 0.0f, yh, int(s.C));
  }
}

void AttentionBackwardBf16(const float *dy, const float *qkv, const uint16_t *qkv16,
                           const float *att, const uint16_t *att16, const AttentionShape &s,
                           float *dqkv, float *scratch) {
  const int64_t hs = s.head_size(), W = s.width(), T = s.T, kv = s.kv(), rep = s.group_size();
  const int t = int(T), d = int(hs), w = int(W);
  const float scale = 1.0f / std::sqrt(float(hs));
  LayerScratch &layer = Layer();
  if (qkv16 == nullptr) {
    RoundToBf16(qkv, s.B * T, W, W, layer.qkv);
    qkv16 = layer.qkv.data();
  }
  RoundToBf16(dy, s.B * T, s.C, s.C, layer.dy);
  const uint16_t *dy16 = layer.dy.data();
#pragma omp parallel for schedule(static)
  for (int64_t bg = 0; bg < s.B * kv; ++bg) {
    const int64_t b = bg / kv, g = bg % kv;
    float *drow0 = dqkv + b * T * W;
    float *dk = drow0 + s.k_offset(g);
    float *dv = drow0 + s.v_offset(g);
    for (int64_t h = g * rep; h < (g + 1) * rep; ++h) {
      const int64_t bh = b * s.H + h;
      const Head head = HeadOf(qkv16, s, b, h);
      const GemmOperand gy = Bf16Operand(dy16 + b * T * s.C + h * hs, int(s.C));
      float *dq = drow0 + s.q_offset(h);
      const float acc = h == g * rep ? 0.0f : 1.0f;  // the group's later heads add to dk, dv
      const float *a = att != nullptr ? att + bh * T * T : nullptr;  // null: att16 alone
      HeadScratch &x = Scratch(T);
      const uint16_t *p = att16 != nullptr ? att16 + bh * T * T : x.p.data();
      if (att16 == nullptr)
        for (int64_t r = 0; r < T; ++r)
          RoundCausalRow(a + r * T, r, CausalBlockEnd(r, T), x.p.data() + r * T);
      float *dscore = scratch + int64_t(omp_get_thread_num()) * T * T;
      const GemmOperand pt = Bf16Operand(p, t);
      for (int64_t r0 = 0; r0 < T; r0 += kCausalBlock) {
        const int64_t r1 = CausalBlockEnd(r0, T);
        // d att [r0, r1) x [0, r1) = g v^T ; dv[r0:r1] (+)= p[r0:T, r0:r1]^T g[r0:T]
        GemmBf16(false, true, int(r1 - r0), int(r1), d, 1.0f, From(gy, r0), head.v, 0.0f,
                 dscore + r0 * T, t);
        GemmBf16(true, false, int(r1 - r0), d, int(T - r0), 1.0f, From(pt, r0, r0), From(gy, r0),
                 acc, dv + r0 * W, w);
      }
      // softmax backward row by row, each row rounded as written
      for (int64_t r = 0; r < T; ++r) {
        const float *pr = a != nullptr ? a + r * T : nullptr;
        if (att16 != nullptr) {  // the stash's copy (the fp32 one may not be kept)
          BFloat16ToFloat(p + r * T, x.row.data(), r + 1);
          pr = x.row.data();
        }
        CausalSoftmaxBackwardRow(pr, dscore + r * T, r, T);
        RoundCausalRow(dscore + r * T, r, CausalBlockEnd(r, T), x.ds.data() + r * T);
      }
      const GemmOperand ds = Bf16Operand(x.ds.data(), t);
      for (int64_t r0 = 0; r0 < T; r0 += kCausalBlock) {
        const int64_t r1 = CausalBlockEnd(r0, T);
        // dq[r0:r1] = scale ds[r0:r1, 0:r1] k[0:r1] ; dk[r0:r1] (+)= scale ds[r0:T, r0:r1]^T q[r0:T]
        GemmBf16(false, false, int(r1 - r0), d, int(r1), scale, From(ds, r0), head.k, 0.0f,
                 dq + r0 * W, w);
        GemmBf16(true, false, int(r1 - r0), d, int(T - r0), scale, From(ds, r0, r0),
                 From(head.q, r0), acc, dk + r0 * W, w);
      }
    }
  }
}

}  // namespace dst::cpu
