#include "core/model/gpt_layers.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/kernels/cpu/activations.h"
#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/embedding.h"
#include "core/kernels/cpu/gemm.h"
#include "core/kernels/cpu/layernorm.h"
#include "core/kernels/cpu/linear.h"
#include "core/kernels/cpu/loss.h"

namespace dst {

namespace {
constexpr double kInitStd = 0.02;  // GPT-2

std::string BlockName(int index, const char *suffix) {
  return "transformer.h." + std::to_string(index) + "." + suffix;
}
}  // namespace

// ---------------------------------------------------------------- embedding

template <typename T>
GptEmbedding<T>::GptEmbedding(const GptDims &dims, ParamRegistry &registry) : dims_(dims) {
  wte_ = registry.Add("transformer.wte.weight", {dims.vocab, dims.d_model},
                      ParamInit::Normal(kInitStd));
  wpe_ = registry.Add("transformer.wpe.weight", {dims.n_ctx, dims.d_model},
                      ParamInit::Normal(kInitStd));
}

template <typename T>
void GptEmbedding<T>::Reserve(const ActivationLimits &limits, MemoryTracker *tracker) {
  out_ = Buffer<T>(tracker, MemoryCategory::kActivations, limits.max_rows() * dims_.d_model);
}

template <typename T>
const T *GptEmbedding<T>::Forward(const T *, const MicroBatch<T> &mb) {
  cpu::EmbeddingForward(mb.tokens, this->store_->param(wte_), this->store_->param(wpe_), mb.B,
                        mb.seq, dims_.d_model, out_.data());
  return out_.data();
}

template <typename T>
void GptEmbedding<T>::Backward(T *dout, T *, const MicroBatch<T> &mb) {
  cpu::EmbeddingBackward(dout, mb.tokens, mb.B, mb.seq, dims_.d_model, this->store_->grad(wte_),
                         this->store_->grad(wpe_));
}

// ---------------------------------------------------------------- block

template <typename T>
GptBlock<T>::GptBlock(const GptDims &dims, int index, ParamRegistry &registry) : dims_(dims) {
  const int64_t C = dims.d_model;
  // GPT-2: residual projections scaled by 1/sqrt(2 * n_layer).
  const double proj_std = kInitStd / std::sqrt(2.0 * double(dims.n_layer));
  ln1_w_ = registry.Add(BlockName(index, "ln_1.weight"), {C}, ParamInit::Constant(1));
  ln1_b_ = registry.Add(BlockName(index, "ln_1.bias"), {C}, ParamInit::Constant(0));
  attn_w_ =
      registry.Add(BlockName(index, "attn.c_attn.weight"), {3 * C, C}, ParamInit::Normal(kInitStd));
  attn_b_ = registry.Add(BlockName(index, "attn.c_attn.bias"), {3 * C}, ParamInit::Constant(0));
  proj_w_ =
      registry.Add(BlockName(index, "attn.c_proj.weight"), {C, C}, ParamInit::Normal(proj_std));
  proj_b_ = registry.Add(BlockName(index, "attn.c_proj.bias"), {C}, ParamInit::Constant(0));
  ln2_w_ = registry.Add(BlockName(index, "ln_2.weight"), {C}, ParamInit::Constant(1));
  ln2_b_ = registry.Add(BlockName(index, "ln_2.bias"), {C}, ParamInit::Constant(0));
  fc_w_ =
      registry.Add(BlockName(index, "mlp.c_fc.weight"), {4 * C, C}, ParamInit::Normal(kInitStd));
  fc_b_ = registry.Add(BlockName(index, "mlp.c_fc.bias"), {4 * C}, ParamInit::Constant(0));
  fcproj_w_ =
      registry.Add(BlockName(index, "mlp.c_proj.weight"), {C, 4 * C}, ParamInit::Normal(proj_std));
  fcproj_b_ = registry.Add(BlockName(index, "mlp.c_proj.bias"), {C}, ParamInit::Constant(0));
}

template <typename T>
void GptBlock<T>::Reserve(const ActivationLimits &limits, MemoryTracker *tracker) {
  const int64_t N = limits.max_rows(), C = dims_.d_model;
  const auto act = MemoryCategory::kActivations;
  ln1_ = Buffer<T>(tracker, act, N * C);
  ln1_mean_ = Buffer<T>(tracker, act, N);
  ln1_rstd_ = Buffer<T>(tracker, act, N);
  qkv_ = Buffer<T>(tracker, act, N * 3 * C);
  att_ = Buffer<T>(tracker, act, limits.max_B * dims_.n_head * limits.max_T * limits.max_T);
  atty_ = Buffer<T>(tracker, act, N * C);
  res2_ = Buffer<T>(tracker, act, N * C);
  ln2_ = Buffer<T>(tracker, act, N * C);
  ln2_mean_ = Buffer<T>(tracker, act, N);
  ln2_rstd_ = Buffer<T>(tracker, act, N);
  fch_ = Buffer<T>(tracker, act, N * 4 * C);
  fch_gelu_ = Buffer<T>(tracker, act, N * 4 * C);
  out_ = Buffer<T>(tracker, act, N * C);
}

// Backward workspace: d_fch [N,4C] | d_ln [N,C] | dqkv [N,3C] | attention [threads,T,T]
// | LayerNorm partial sums [threads, 2C].
template <typename T>
int64_t GptBlock<T>::ScratchSize(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = dims_.d_model;
  return N * 8 * C + int64_t(limits.max_threads) * (limits.max_T * limits.max_T + 2 * C);
}

template <typename T>
const T *GptBlock<T>::Forward(const T *in, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model;
  in_ = in;
  cpu::LayerNormForward(in, p.param(ln1_w_), p.param(ln1_b_), N, C, ln1_.data(), ln1_mean_.data(),
                        ln1_rstd_.data());
  cpu::LinearForward(ln1_.data(), p.param(attn_w_), p.param(attn_b_), N, C, 3 * C, qkv_.data());
  cpu::AttentionForward(qkv_.data(), cpu::AttentionShape{mb.B, mb.seq, C, dims_.n_head},
                        att_.data(), atty_.data());
  // attention projection into out_ (as scratch), then the first residual
  cpu::LinearForward(atty_.data(), p.param(proj_w_), p.param(proj_b_), N, C, C, out_.data());
  cpu::Add(in, out_.data(), N * C, res2_.data());
  cpu::LayerNormForward(res2_.data(), p.param(ln2_w_), p.param(ln2_b_), N, C, ln2_.data(),
                        ln2_mean_.data(), ln2_rstd_.data());
  cpu::LinearForward(ln2_.data(), p.param(fc_w_), p.param(fc_b_), N, C, 4 * C, fch_.data());
  cpu::GeluForward(fch_.data(), N * 4 * C, fch_gelu_.data());
  cpu::LinearForward(fch_gelu_.data(), p.param(fcproj_w_), p.param(fcproj_b_), N, 4 * C, C,
                     out_.data());
  cpu::AddInPlace(res2_.data(), N * C, out_.data());
  return out_.data();
}

template <typename T>
void GptBlock<T>::Backward(T *dout, T *din, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model;
  T *d_fch = mb.scratch;                                                    // [N, 4C]
  T *d_ln = d_fch + N * 4 * C;                                              // [N, C]
  T *dqkv = d_ln + N * C;                                                   // [N, 3C]
  T *att_scratch = dqkv + N * 3 * C;                                        // [threads, T, T]
  T *ln_scratch = att_scratch + int64_t(mb.max_threads) * mb.seq * mb.seq;  // [threads, 2C]

  // MLP branch; dout doubles as the gradient of res2 (residual).
  cpu::LinearBackward(dout, fch_gelu_.data(), p.param(fcproj_w_), N, 4 * C, C, d_fch,
                      p.grad(fcproj_w_), p.grad(fcproj_b_));
  cpu::GeluBackward(d_fch, fch_.data(), N * 4 * C, d_fch);
  cpu::LinearBackward(d_fch, ln2_.data(), p.param(fc_w_), N, C, 4 * C, d_ln, p.grad(fc_w_),
                      p.grad(fc_b_));
  cpu::LayerNormBackward(d_ln, res2_.data(), p.param(ln2_w_), ln2_mean_.data(), ln2_rstd_.data(), N,
                         C, dout, p.grad(ln2_w_), p.grad(ln2_b_), ln_scratch, mb.max_threads);
  // Attention branch; the residual passes dout (now d res2) straight to din.
  cpu::LinearBackward(dout, atty_.data(), p.param(proj_w_), N, C, C, d_ln, p.grad(proj_w_),
                      p.grad(proj_b_));
  cpu::AttentionBackward(d_ln, qkv_.data(), att_.data(),
                         cpu::AttentionShape{mb.B, mb.seq, C, dims_.n_head}, dqkv, att_scratch);
  cpu::LinearBackward(dqkv, ln1_.data(), p.param(attn_w_), N, C, 3 * C, d_ln, p.grad(attn_w_),
                      p.grad(attn_b_));
  if (!din)
    din = dout;  // first layer: the input gradient is not needed, but ln_1's is
  else
    std::memcpy(din, dout, size_t(N * C) * sizeof(T));
  cpu::LayerNormBackward(d_ln, in_, p.param(ln1_w_), ln1_mean_.data(), ln1_rstd_.data(), N, C, din,
                         p.grad(ln1_w_), p.grad(ln1_b_), ln_scratch, mb.max_threads);
}

template <typename T>
double GptBlock<T>::ForwardFlops(int64_t B, int64_t seq) const {
  const double N = double(B * seq), C = double(dims_.d_model);
  const double linear = 2.0 * N * C * (3 * C + C + 4 * C + 4 * C);
  const double attention = 2.0 * 2.0 * double(B) * double(seq) * double(seq) * C;  // QK^T and AV
  return linear + attention;
}

// ---------------------------------------------------------------- head

template <typename T>
GptHead<T>::GptHead(const GptDims &dims, int wte_id, ParamRegistry &registry)
    : dims_(dims), wte_(wte_id) {
  lnf_w_ = registry.Add("transformer.ln_f.weight", {dims.d_model}, ParamInit::Constant(1));
  lnf_b_ = registry.Add("transformer.ln_f.bias", {dims.d_model}, ParamInit::Constant(0));
}

template <typename T>
void GptHead<T>::Reserve(const ActivationLimits &limits, MemoryTracker *tracker) {
  const int64_t N = limits.max_rows(), C = dims_.d_model;
  const auto act = MemoryCategory::kActivations;
  lnf_ = Buffer<T>(tracker, act, N * C);
  lnf_mean_ = Buffer<T>(tracker, act, N);
  lnf_rstd_ = Buffer<T>(tracker, act, N);
  probs_ = Buffer<T>(tracker, act, N * dims_.vocab);
}

// Backward workspace: dlogits [N, V] | d_lnf [N, C] | LayerNorm partial sums [threads, 2C].
template <typename T>
int64_t GptHead<T>::ScratchSize(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = dims_.d_model;
  return N * (dims_.vocab + C) + int64_t(limits.max_threads) * 2 * C;
}

template <typename T>
const T *GptHead<T>::Forward(const T *in, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model, V = dims_.vocab;
  in_ = in;
  cpu::LayerNormForward(in, p.param(lnf_w_), p.param(lnf_b_), N, C, lnf_.data(), lnf_mean_.data(),
                        lnf_rstd_.data());
  cpu::LinearForward<T>(lnf_.data(), p.param(wte_), nullptr, N, C, V, probs_.data());
  loss_ = double(cpu::SoftmaxCrossEntropyForward(probs_.data(), mb.targets, N, V, &counted_));
  return nullptr;
}

template <typename T>
void GptHead<T>::Backward(T *, T *din, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model, V = dims_.vocab;
  T *dlogits = mb.scratch;        // [N, V]
  T *d_lnf = dlogits + N * V;     // [N, C]
  T *ln_scratch = d_lnf + N * C;  // [threads, 2C]
  cpu::SoftmaxCrossEntropyBackward(probs_.data(), mb.targets, N, V, counted_, mb.grad_scale,
                                   dlogits);
  cpu::LinearBackward<T>(dlogits, lnf_.data(), p.param(wte_), N, C, V, d_lnf, p.grad(wte_),
                         nullptr);
  std::memset(din, 0, size_t(N * C) * sizeof(T));
  cpu::LayerNormBackward(d_lnf, in_, p.param(lnf_w_), lnf_mean_.data(), lnf_rstd_.data(), N, C, din,
                         p.grad(lnf_w_), p.grad(lnf_b_), ln_scratch, mb.max_threads);
}

template <typename T>
double GptHead<T>::ForwardFlops(int64_t B, int64_t seq) const {
  return 2.0 * double(B * seq) * double(dims_.d_model) * double(dims_.vocab);
}

template class GptEmbedding<float>;
template class GptEmbedding<double>;
template class GptBlock<float>;
template class GptBlock<double>;
template class GptHead<float>;
template class GptHead<double>;

}  // namespace dst
