// Causal self-attention with bf16 GEMMs (attention.h's kBf16 forms): per
// (batch, head) task, each operand is rounded to bf16 once into the thread's
// scratch and read by every GEMM that needs it.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/gemm.h"

namespace dst::cpu {

namespace {

// One thread's bf16 copies of a head's operands (grown once, then reused).
struct HeadScratch {
  std::vector<uint16_t> q, k, v;  // [T, hs] each
  std::vector<uint16_t> g;        // output gradient [T, hs]
  std::vector<uint16_t> p;        // probabilities [T, T]
  std::vector<uint16_t> ds;       // score gradient [T, T]
};

HeadScratch &Scratch() {
  thread_local HeadScratch scratch;
  return scratch;
}

// x [rows, cols] with row stride ld rounded into out [rows, cols] (this
// thread only: the tasks already run in parallel).
const uint16_t *RoundRows(const float *x, int64_t rows, int64_t cols, int64_t ld,
                          std::vector<uint16_t> &out) {
  out.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) RoundRowToBf16(x + r * ld, out.data() + r * cols, cols);
  return out.data();
}

// One task's views of the head in qkv [B, T, 3C] (row stride 3C).
struct Head {
  const float *q, *k, *v;
};

Head HeadOf(const float *qkv, const AttentionShape &s, int64_t b, int64_t h) {
  const float *q = qkv + b * s.T * 3 * s.C + h * s.head_size();
  return {q, q + s.C, q + 2 * s.C};
}

}  // namespace

void AttentionForwardBf16(const float *qkv, const AttentionShape &s, float *att, float *y) {
  const int64_t hs = s.head_size(), C3 = 3 * s.C, T = s.T;
  const int t = int(T), d = int(hs);
  const float scale = 1.0f / std::sqrt(float(hs));
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    const Head head = HeadOf(qkv, s, b, h);
    HeadScratch &x = Scratch();
    const uint16_t *q = RoundRows(head.q, T, hs, C3, x.q);
    const uint16_t *k = RoundRows(head.k, T, hs, C3, x.k);
    const uint16_t *v = RoundRows(head.v, T, hs, C3, x.v);
    x.p.resize(size_t(T * T));
    float *a = att + bh * T * T;
    // scores [T, T] = scale q k^T; softmax row by row, each row rounded as written
    GemmBf16(false, true, t, t, d, scale, Bf16Operand(q, d), Bf16Operand(k, d), 0.0f, a, t);
    for (int64_t r = 0; r < T; ++r) {
      CausalSoftmaxRow(a + r * T, r, T);
      RoundRowToBf16(a + r * T, x.p.data() + r * T, T);
    }
    // y[b, :, h] [T, hs] = p v
    GemmBf16(false, false, t, d, t, 1.0f, Bf16Operand(x.p.data(), t), Bf16Operand(v, d), 0.0f,
             y + b * T * s.C + h * hs, int(s.C));
  }
}

void AttentionBackwardBf16(const float *dy, const float *qkv, const float *att,
                           const AttentionShape &s, float *dqkv, float *scratch) {
  const int64_t hs = s.head_size(), C3 = 3 * s.C, T = s.T;
  const int t = int(T), d = int(hs), c3 = int(C3);
  const float scale = 1.0f / std::sqrt(float(hs));
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    const Head head = HeadOf(qkv, s, b, h);
    float *dq = dqkv + b * T * C3 + h * hs;
    float *dk = dq + s.C;
    float *dv = dq + 2 * s.C;
    const float *a = att + bh * T * T;
    HeadScratch &x = Scratch();
    const uint16_t *g = RoundRows(dy + b * T * s.C + h * hs, T, hs, s.C, x.g);
    const uint16_t *v = RoundRows(head.v, T, hs, C3, x.v);
    const uint16_t *p = RoundRows(a, T, T, T, x.p);
    float *dscore = scratch + int64_t(omp_get_thread_num()) * T * T;
    // d att = g v^T ; dv = p^T g
    GemmBf16(false, true, t, t, d, 1.0f, Bf16Operand(g, d), Bf16Operand(v, d), 0.0f, dscore, t);
    GemmBf16(true, false, t, d, t, 1.0f, Bf16Operand(p, t), Bf16Operand(g, d), 0.0f, dv, c3);
    // softmax backward row by row, each row rounded as written
    x.ds.resize(size_t(T * T));
    for (int64_t r = 0; r < T; ++r) {
      CausalSoftmaxBackwardRow(a + r * T, dscore + r * T, r, T);
      RoundRowToBf16(dscore + r * T, x.ds.data() + r * T, T);
    }
    // dq = scale ds k ; dk = scale ds^T q
    const uint16_t *k = RoundRows(head.k, T, hs, C3, x.k);
    const uint16_t *q = RoundRows(head.q, T, hs, C3, x.q);
    GemmBf16(false, false, t, d, t, scale, Bf16Operand(x.ds.data(), t), Bf16Operand(k, d), 0.0f, dq,
             c3);
    GemmBf16(true, false, t, d, t, scale, Bf16Operand(x.ds.data(), t), Bf16Operand(q, d), 0.0f, dk,
             c3);
  }
}

}  // namespace dst::cpu
