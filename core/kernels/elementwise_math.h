// Element-wise math shared by the CPU kernels and (later) the CUDA kernels:
// every function is a plain inline function marked DST_HOST_DEVICE, so the
// CPU tests exercise the formulas the GPU runs.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/common/host_device.h"

namespace dst::math {

inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluCubic = 0.044715f;

// FastExp's constants, shared with its AVX2 and AVX-512 forms (vector_math.h,
// vector_math_avx512.cc) so that every form computes the same values: the
// clamp, log2(e), ln2 split in two for exactness, and the degree-7 Taylor
// polynomial of exp(r) from its highest coefficient (1/7!) down.
inline constexpr float kExpMin = -87.3f, kExpMax = 88.3f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187e-06f;
inline constexpr float kExpP7 = 1.98412698e-4f, kExpP6 = 1.38888889e-3f, kExpP5 = 8.33333333e-3f,
                       kExpP4 = 4.16666667e-2f, kExpP3 = 1.66666667e-1f, kExpP2 = 0.5f,
                       kExpP1 = 1.0f, kExpP0 = 1.0f;

// exp(x) in float with relative error < 2e-7 over the whole range, written so
// that GCC vectorises it (no branches, no calls): x = n ln2 + r with
// |r| <= ln2/2, exp(r) by a degree-7 polynomial, 2^n through the exponent bits.
DST_HOST_DEVICE inline float FastExp(float x) {
  x = x < kExpMin ? kExpMin : (x > kExpMax ? kExpMax : x);
  const float n = std::floor(x * kLog2e + 0.5f);
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = kExpP7;
  p = p * r + kExpP6;
  p = p * r + kExpP5;
  p = p * r + kExpP4;
  p = p * r + kExpP3;
  p = p * r + kExpP2;
  p = p * r + kExpP1;
  p = p * r + kExpP0;
  // NaN stays NaN through p; the exponent must not come from converting it.
  const int32_t bits = (static_cast<int32_t>(n == n ? n : 0.0f) + 127) << 23;
  return p * __builtin_bit_cast(float, bits);  // std::bit_cast, also in nvcc's C++17
}
DST_HOST_DEVICE inline double FastExp(double x) {
  return std::exp(x);
}

// tanh through exp: tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|).
DST_HOST_DEVICE inline float FastTanh(float x) {
  const float e = FastExp(-2.0f * std::fabs(x));
  const float t = (1.0f - e) / (1.0f + e);
  return x < 0.0f ? -t : t;
}
DST_HOST_DEVICE inline double FastTanh(double x) {
  return std::tanh(x);
}

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
DST_HOST_DEVICE inline T Gelu(T x) {
  const T inner = T(kGeluScale) * (x + T(kGeluCubic) * x * x * x);
  return T(0.5) * x * (T(1) + FastTanh(inner));
}

// d GELU / dx for the tanh approximation.
template <typename T>
DST_HOST_DEVICE inline T GeluGrad(T x) {
  const T inner = T(kGeluScale) * (x + T(kGeluCubic) * x * x * x);
  const T t = FastTanh(inner);
  const T dinner = T(kGeluScale) * (T(1) + T(3) * T(kGeluCubic) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner;
}

// SiLU (swish): x sigmoid(x) = x / (1 + exp(-x)), as torch computes it; the
// gated MLP of LLaMA-family models multiplies it by the up projection.
template <typename T>
DST_HOST_DEVICE inline T Silu(T x) {
  return x / (T(1) + FastExp(-x));
}

// d SiLU / dx = s (1 + x (1 - s)), s = sigmoid(x).
template <typename T>
DST_HOST_DEVICE inline T SiluGrad(T x) {
  const T s = T(1) / (T(1) + FastExp(-x));
  return s * (T(1) + x * (T(1) - s));
}

// How rotary position embeddings turn a position into angles (Hugging Face's
// rope_type): kDefault theta^(-2i/d); kLinear divides every frequency by
// `factor` (positions interpolated); kLlama3 divides the low frequencies by
// `factor`, keeps the high ones, and blends between (Llama 3.1's scaling,
// `original_max_position_embeddings` the context it was trained at).
enum class RopeScaling : int32_t { kDefault = 0, kLinear = 1, kLlama3 = 2 };

struct RopeParams {
  float theta = 10000.0f;  // rope_theta
  int32_t scaling = 0;     // RopeScaling
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_position = 8192.0f;
};

// The inverse frequency of rotary pair i of a head of `dim` values (pairs i
// and i + dim / 2, Hugging Face's rotate_half layout), in float as
// transformers computes it: 1 / theta^(2i / dim), then the scaling.
DST_HOST_DEVICE inline float RopeInvFreq(const RopeParams &r, int64_t i, int64_t dim) {
  const float exponent = float(2 * i) / float(dim);
  float inv = 1.0f / std::pow(r.theta, exponent);
  if (r.scaling == int32_t(RopeScaling::kLinear)) return inv / r.factor;
  if (r.scaling != int32_t(RopeScaling::kLlama3)) return inv;
  const float kTwoPi = 6.283185307179586f;
  const float low_wavelen = r.original_max_position / r.low_freq_factor;
  const float high_wavelen = r.original_max_position / r.high_freq_factor;
  const float wavelen = kTwoPi / inv;
  if (wavelen > low_wavelen) return inv / r.factor;  // low frequencies: interpolated
  if (wavelen < high_wavelen) return inv;            // high frequencies: kept
  const float smooth = (r.original_max_position / wavelen - r.low_freq_factor) /
                       (r.high_freq_factor - r.low_freq_factor);
  return (1.0f - smooth) * inv / r.factor + smooth * inv;
}

// ALiBi's slope for head h of n_heads (BLOOM, Press et al.): the geometric
// sequence 2^(-8 k / p), k = 1..p, over the largest power of two p <= n_heads,
// then for the remaining heads every other term of the sequence for 2p.
DST_HOST_DEVICE inline float AlibiSlope(int64_t h, int64_t n_heads) {
  int64_t p = 1;
  while (p * 2 <= n_heads) p *= 2;
  if (h < p) return float(std::pow(2.0, -8.0 * double(h + 1) / double(p)));
  const int64_t k = 2 * (h - p) + 1;  // 1, 3, 5, ... over 2p
  return float(std::pow(2.0, -8.0 * double(k) / double(2 * p)));
}

// One Adam/AdamW step's constants, in float, as every path uses them (the CPU's
// scalar and vector paths, the CUDA kernel): made on the host per step.
struct AdamConstants {
  float b1, omb1, b2, omb2;  // beta1, 1 - beta1, beta2, 1 - beta2
  float bias2_sqrt;          // sqrt(1 - beta2^step)
  float step_size;           // lr / (1 - beta1^step)
  float decay;               // AdamW: 1 - lr * weight_decay; Adam: 1
  float l2;                  // Adam: weight_decay (added to the gradient); AdamW: 0
  float eps;
  float grad_mul;  // applied to the gradient first (unscale x clip)
};

// One element's update, in the order the vector paths compute it:
// g' = g * grad_mul + l2 p; m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;
// p = p * decay - step_size m / (sqrt(v) / bias2_sqrt + eps).
// The weights from the moments: Adam's last line, alone where the moments
// came another way (1-bit Adam's exchanged momentum over a frozen variance).
DST_HOST_DEVICE inline void AdamApplyElement(float &p, float m, float v, const AdamConstants &k) {
  const float denom = std::sqrt(v) / k.bias2_sqrt + k.eps;
  p = p * k.decay - (k.step_size * m) / denom;
}

DST_HOST_DEVICE inline void AdamElement(float &p, float grad, float &m, float &v,
                                        const AdamConstants &k) {
  const float g = grad * k.grad_mul + k.l2 * p;
  m = k.b1 * m + k.omb1 * g;
  v = k.b2 * v + k.omb2 * (g * g);
  AdamApplyElement(p, m, v, k);
}

// One Lamb step's constants (DeepSpeed's FusedLamb), in float as every path
// uses them.
struct LambConstants {
  float b1, omb1, b2, omb2;  // beta1, 1 - beta1, beta2, 1 - beta2
  float eps;
  bool eps_inside_sqrt;  // sqrt(v + eps) instead of sqrt(v) + eps
  float weight_decay;    // added to the update, inside the trust ratio
  float grad_mul;        // applied to the gradient first (unscale x clip)
};

// Lamb's update direction for one element from its moments: u = m / denom +
// wd p, whose norm (with the weight's) makes the tensor's trust ratio. The
// moments stay uncorrected; the bias correction is the step size's
// (FusedLamb's).
DST_HOST_DEVICE inline float LambDirection(float p, float m, float v, const LambConstants &k) {
  const float denom = k.eps_inside_sqrt ? std::sqrt(v + k.eps) : std::sqrt(v) + k.eps;
  return m / denom + k.weight_decay * p;
}

// Lamb's first half for one element: the moments from the gradient, then
// the direction.
DST_HOST_DEVICE inline float LambMomentsElement(float p, float grad, float &m, float &v,
                                                const LambConstants &k) {
  const float g = grad * k.grad_mul;
  m = k.b1 * m + k.omb1 * g;
  v = k.b2 * v + k.omb2 * (g * g);
  return LambDirection(p, m, v, k);
}

// One SGD element, torch.optim.SGD's rule (the CPU loop and the CUDA kernel):
// g = grad + wd p; with momentum, buf = first ? g : momentum buf + damp g and
// g = nesterov ? g + momentum buf : buf; then p -= lr g. damp = 1 - dampening.
template <typename T>
DST_HOST_DEVICE inline void SgdElement(T &p, T grad, T *buf, T lr, T momentum, T damp, T wd,
                                       bool nesterov, bool first_step) {
  T g = grad + wd * p;
  if (buf != nullptr) {
    const T b = first_step ? g : momentum * *buf + damp * g;
    *buf = b;
    g = nesterov ? g + momentum * b : b;
  }
  p -= lr * g;
}

}  // namespace dst::math
