// The kernels the LLaMA and BLOOM families add (RMSNorm, rotary embeddings,
// the SiLU gate, attention with grouped-query heads, BLOOM's interleaved
// layout and ALiBi), each against a direct implementation of its published
// formula in double precision, and their backward passes against central
// finite differences.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/kernels/cpu/activations.h"
#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/rmsnorm.h"
#include "core/kernels/cpu/rotary.h"
#include "core/runtime/rng.h"

namespace dst {
namespace {

std::vector<double> Random(int64_t n, uint64_t seed, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * StandardNormal(seed, 7, uint64_t(i));
  return v;
}

double MaxAbsDiff(const std::vector<double> &a, const std::vector<double> &b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

// d loss / d x[i] by central differences, loss = <w, f(x)>.
std::vector<double> NumericGradient(
    std::vector<double> x, const std::vector<double> &w,
    const std::function<std::vector<double>(const std::vector<double> &)> &f) {
  std::vector<double> grad(x.size());
  const double h = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    std::vector<double> up = f(x);
    x[i] = saved - h;
    std::vector<double> down = f(x);
    x[i] = saved;
    double d = 0;
    for (size_t j = 0; j < w.size(); ++j) d += w[j] * (up[j] - down[j]);
    grad[i] = d / (2 * h);
  }
  return grad;
}

TEST(FamilyKernels, RmsNormMatchesItsFormulaAndFiniteDifferences) {
  const int64_t rows = 3, C = 8;
  const double eps = 1e-6;
  const std::vector<double> x = Random(rows * C, 1), w = Random(C, 2), dout = Random(rows * C, 3);
  std::vector<double> out(static_cast<size_t>(rows * C)), rstd(static_cast<size_t>(rows));
  cpu::RmsNormForward(x.data(), w.data(), rows, C, eps, out.data(), rstd.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < C; ++i) ss += x[size_t(r * C + i)] * x[size_t(r * C + i)];
    const double s = 1 / std::sqrt(ss / double(C) + eps);
    for (int64_t i = 0; i < C; ++i)
      EXPECT_NEAR(out[size_t(r * C + i)], w[size_t(i)] * x[size_t(r * C + i)] * s, 1e-12);
  }
  // The input gradient (added to what dx held) and the weight's.
  std::vector<double> dx(static_cast<size_t>(rows * C), 0.5), dw(static_cast<size_t>(C), 0.25),
      scratch(static_cast<size_t>(2 * C));
  cpu::RmsNormBackward(dout.data(), x.data(), w.data(), rstd.data(), rows, C, dx.data(), dw.data(),
                       scratch.data(), 1);
  auto forward_x = [&](const std::vector<double> &xx) {
    std::vector<double> o(static_cast<size_t>(rows * C)), r(static_cast<size_t>(rows));
    cpu::RmsNormForward(xx.data(), w.data(), rows, C, eps, o.data(), r.data());
    return o;
  };
  auto forward_w = [&](const std::vector<double> &ww) {
    std::vector<double> o(static_cast<size_t>(rows * C)), r(static_cast<size_t>(rows));
    cpu::RmsNormForward(x.data(), ww.data(), rows, C, eps, o.data(), r.data());
    return o;
  };
  std::vector<double> ndx = NumericGradient(x, dout, forward_x),
                      ndw = NumericGradient(w, dout, forward_w);
  for (double &v : ndx) v += 0.5;
  for (double &v : ndw) v += 0.25;
  EXPECT_LT(MaxAbsDiff(dx, ndx), 1e-7);
  EXPECT_LT(MaxAbsDiff(dw, ndw), 1e-7);
  // The fused residual form gives the same bits as the sum, then the norm.
  const std::vector<double> a = Random(rows * C, 4);
  std::vector<double> res(static_cast<size_t>(rows * C)), sum(static_cast<size_t>(rows * C)),
      out2(static_cast<size_t>(rows * C));
  std::vector<double> rstd2(static_cast<size_t>(rows));
  cpu::AddRmsNormForward(a.data(), x.data(), res.data(), w.data(), rows, C, eps, out2.data(),
                         rstd2.data());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = a[i] + x[i];
  cpu::RmsNormForward(sum.data(), w.data(), rows, C, eps, out.data(), rstd.data());
  EXPECT_EQ(out, out2);
  EXPECT_EQ(res, sum);
}

TEST(FamilyKernels, SiluGateMatchesItsFormulaAndFiniteDifferences) {
  const int64_t n = 40;
  const std::vector<double> gate = Random(n, 5, 3.0), up = Random(n, 6), dout = Random(n, 7);
  std::vector<double> out(static_cast<size_t>(n)), dgate(static_cast<size_t>(n)),
      dup(static_cast<size_t>(n));
  cpu::SiluMulForward(gate.data(), up.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[size_t(i)];
    EXPECT_NEAR(out[size_t(i)], g / (1 + std::exp(-g)) * up[size_t(i)], 1e-12);
  }
  cpu::SiluMulBackward(dout.data(), gate.data(), up.data(), n, dgate.data(), dup.data());
  auto f_gate = [&](const std::vector<double> &g) {
    std::vector<double> o(static_cast<size_t>(n));
    cpu::SiluMulForward(g.data(), up.data(), n, o.data());
    return o;
  };
  auto f_up = [&](const std::vector<double> &u) {
    std::vector<double> o(static_cast<size_t>(n));
    cpu::SiluMulForward(gate.data(), u.data(), n, o.data());
    return o;
  };
  EXPECT_LT(MaxAbsDiff(dgate, NumericGradient(gate, dout, f_gate)), 1e-7);
  EXPECT_LT(MaxAbsDiff(dup, NumericGradient(up, dout, f_up)), 1e-7);
  // The float form with only the bf16 copy written equals rounding its fp32 output.
  std::vector<float> g32(gate.begin(), gate.end()), u32(up.begin(), up.end()),
      o32(static_cast<size_t>(n));
  std::vector<uint16_t> copy(static_cast<size_t>(n)), only(static_cast<size_t>(n));
  cpu::SiluMulForward(g32.data(), u32.data(), n, o32.data(), copy.data());
  cpu::SiluMulForward(g32.data(), u32.data(), n, static_cast<float *>(nullptr), only.data());
  EXPECT_EQ(copy, only);
}

// transformers' default inverse frequencies and Llama 3.1's scaling, written
// out from modeling_rope_utils in double.
double ReferenceInvFreq(const math::RopeParams &r, int64_t i, int64_t dim) {
  double inv = 1.0 / std::pow(double(r.theta), double(2 * i) / double(dim));
  if (r.scaling == int32_t(math::RopeScaling::kLinear)) return inv / r.factor;
  if (r.scaling != int32_t(math::RopeScaling::kLlama3)) return inv;
  const double low = r.original_max_position / r.low_freq_factor;
  const double high = r.original_max_position / r.high_freq_factor;
  const double wavelen = 2 * M_PI / inv;
  if (wavelen > low) return inv / r.factor;
  if (wavelen < high) return inv;
  const double smooth = (r.original_max_position / wavelen - r.low_freq_factor) /
                        (r.high_freq_factor - r.low_freq_factor);
  return (1 - smooth) * inv / r.factor + smooth * inv;
}

TEST(FamilyKernels, RopeFrequenciesFollowTransformersForEveryScaling) {
  math::RopeParams rope;
  rope.theta = 500000.0f;
  for (int32_t scaling : {0, 1, 2}) {
    rope.scaling = scaling;
    rope.factor = 8.0f;
    for (int64_t i = 0; i < 64; ++i) {
      const double want = ReferenceInvFreq(rope, i, 128);
      EXPECT_NEAR(math::RopeInvFreq(rope, i, 128), want, 2e-6 * want) << scaling << " " << i;
    }
  }
  // Llama 3.1's scaling leaves the highest frequency and divides the lowest.
  rope.scaling = 2;
  EXPECT_FLOAT_EQ(math::RopeInvFreq(rope, 0, 128), 1.0f);
  EXPECT_NEAR(math::RopeInvFreq(rope, 63, 128), ReferenceInvFreq({500000.0f}, 63, 128) / 8, 1e-12);
}

// q, k or v head h of a packed qkv row, as the layouts define it.
AttentionShape Shape(int64_t B, int64_t T, int64_t H, int64_t kv, int64_t hs, bool interleaved,
                     int64_t alibi) {
  AttentionShape s{B, T, H * hs, H};
  s.kv_heads = kv;
  s.interleaved = interleaved;
  s.alibi_heads = alibi;
  return s;
}

// The attention written out from the formulas (transformers' eager
// attention: repeat_kv, scores / sqrt(hs) + ALiBi slope x key position,
// causal mask, softmax, weighted values).
std::vector<double> ReferenceAttention(const std::vector<double> &qkv, const AttentionShape &s) {
  const int64_t hs = s.head_size(), W = s.width();
  std::vector<double> y(static_cast<size_t>(s.B * s.T * s.C));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t g = h / (s.H / s.kv());
      const double slope = s.alibi_heads ? math::AlibiSlope(s.first_head + h, s.alibi_heads) : 0;
      for (int64_t t = 0; t < s.T; ++t) {
        std::vector<double> p(static_cast<size_t>(t + 1));
        double maxv = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hs; ++d)
            dot += qkv[size_t((b * s.T + t) * W + s.q_offset(h) + d)] *
                   qkv[size_t((b * s.T + j) * W + s.k_offset(g) + d)];
          p[size_t(j)] = dot / std::sqrt(double(hs)) + slope * double(j);
          maxv = std::max(maxv, p[size_t(j)]);
        }
        double sum = 0;
        for (double &v : p) sum += (v = std::exp(v - maxv));
        for (int64_t d = 0; d < hs; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= t; ++j)
            acc += p[size_t(j)] / sum * qkv[size_t((b * s.T + j) * W + s.v_offset(g) + d)];
          y[size_t((b * s.T + t) * s.C + h * hs + d)] = acc;
        }
      }
    }
  return y;
}

std::vector<double> Attend(const std::vector<double> &qkv, const AttentionShape &s) {
  std::vector<double> att(static_cast<size_t>(s.B * s.H * s.T * s.T)),
      y(static_cast<size_t>(s.B * s.T * s.C));
  cpu::AttentionForward(qkv.data(), s, att.data(), y.data());
  return y;
}

TEST(FamilyKernels, AttentionWithGroupedHeadsInterleavedLayoutAndAlibiMatchesTheFormula) {
  struct Case {
    int64_t H, kv;
    bool interleaved;
    int64_t alibi;
    int64_t B = 2, T = 5;
  };
  // The longer sequences cross causal blocks (kCausalBlock rows), the last one partial.
  const int64_t long_t = cpu::kCausalBlock + 3;
  for (const Case c : {Case{4, 4, false, 0}, Case{4, 2, false, 0}, Case{4, 1, false, 0},
                       Case{6, 6, true, 6}, Case{3, 3, false, 3}, Case{4, 2, false, 8},
                       Case{2, 1, false, 0, 1, long_t}, Case{2, 2, true, 2, 1, long_t}}) {
    AttentionShape s = Shape(c.B, c.T, c.H, c.kv, 4, c.interleaved, c.alibi);
    if (c.alibi == 8) s.first_head = 4;  // a tensor-parallel rank's heads 4..7 of 8
    const std::vector<double> qkv = Random(s.B * s.T * s.width(), 8);
    EXPECT_LT(MaxAbsDiff(Attend(qkv, s), ReferenceAttention(qkv, s)), 1e-12)
        << c.H << " " << c.kv << " " << c.interleaved << " " << c.alibi << " " << c.T;
    // Its backward (with the group's heads adding into one key/value head)
    // against finite differences of the forward.
    const std::vector<double> dy = Random(s.B * s.T * s.C, 9);
    std::vector<double> att(static_cast<size_t>(s.B * s.H * s.T * s.T)),
        y(static_cast<size_t>(s.B * s.T * s.C));
    std::vector<double> dqkv(qkv.size(), 7.0),
        scratch(static_cast<size_t>(omp_get_max_threads() * s.T * s.T));  // a [T, T] per thread
    cpu::AttentionForward(qkv.data(), s, att.data(), y.data());
    cpu::AttentionBackward(dy.data(), qkv.data(), att.data(), s, dqkv.data(), scratch.data());
    EXPECT_LT(
        MaxAbsDiff(dqkv, NumericGradient(qkv, dy, [&](const auto &x) { return Attend(x, s); })),
        1e-7);
  }
}

TEST(FamilyKernels, AlibiSlopesAreBloomsForAnyHeadCount) {
  // transformers' build_alibi_tensor: 2^(-8k/p) over the largest power of two
  // p, then the odd terms of 2^(-8k/2p) for the heads beyond it.
  EXPECT_DOUBLE_EQ(math::AlibiSlope(0, 8), 0.5);
  EXPECT_DOUBLE_EQ(math::AlibiSlope(7, 8), std::pow(2.0, -8.0));
  const double six[] = {
      0.25, 0.0625, 0.015625, 0.00390625, std::pow(2.0, -1.0), std::pow(2.0, -3.0)};
  for (int h = 0; h < 6; ++h) EXPECT_FLOAT_EQ(math::AlibiSlope(h, 6), float(six[h])) << h;
}

TEST(FamilyKernels, RotaryMatchesRotateHalfAndItsInverseUndoesIt) {
  AttentionShape s = Shape(2, 6, 4, 2, 8, false, 0);
  math::RopeParams rope;
  rope.theta = 10000.0f;
  const std::vector<double> qkv = Random(s.B * s.T * s.width(), 10);
  std::vector<double> rotated = qkv;
  cpu::RotaryForward(rotated.data(), s, rope, false);
  const int64_t hs = s.head_size(), half = hs / 2;
  for (int64_t r = 0; r < s.B * s.T; ++r) {
    const int64_t t = r % s.T;
    const double *x = qkv.data() + r * s.width();
    const double *o = rotated.data() + r * s.width();
    auto check_head = [&](int64_t off) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(float(t) * math::RopeInvFreq(rope, i, hs));
        EXPECT_NEAR(o[off + i], x[off + i] * std::cos(angle) - x[off + i + half] * std::sin(angle),
                    1e-6);
        EXPECT_NEAR(o[off + i + half],
                    x[off + i + half] * std::cos(angle) + x[off + i] * std::sin(angle), 1e-6);
      }
    };
    for (int64_t h = 0; h < s.H; ++h) check_head(s.q_offset(h));
    for (int64_t g = 0; g < s.kv(); ++g) check_head(s.k_offset(g));
    for (int64_t g = 0; g < s.kv(); ++g)  // values are not rotated
      for (int64_t d = 0; d < hs; ++d) EXPECT_EQ(o[s.v_offset(g) + d], x[s.v_offset(g) + d]);
  }
  cpu::RotaryForward(rotated.data(), s, rope, true);
  EXPECT_LT(MaxAbsDiff(rotated, qkv), 1e-6);  // cos^2 + sin^2 is 1 to float's precision
}

}  // namespace
}  // namespace dst
