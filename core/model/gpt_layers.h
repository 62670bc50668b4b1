// The GPT-2 layers: embedding, transformer block, and the head (final
// LayerNorm, LM head tied to the token embedding, cross-entropy).
#pragma once

#include <string>

#include "core/model/layer.h"

namespace dst {

struct GptDims {
  int64_t vocab = 256;
  int64_t n_ctx = 256;
  int64_t n_layer = 1;
  int64_t n_head = 1;
  int64_t d_model = 64;
};

// x[b, t] = wte[token[b, t]] + wpe[t]  ->  [B, T, C]
template <typename T>
class GptEmbedding final : public Layer<T> {
 public:
  GptEmbedding(const GptDims &dims, ParamRegistry &registry);
  std::string_view Kind() const override { return "gpt_embedding"; }
  int64_t OutWidth() const override { return dims_.d_model; }
  void Reserve(const ActivationLimits &limits, MemoryTracker *tracker) override;
  const T *Forward(const T *in, const MicroBatch<T> &mb) override;
  void Backward(T *dout, T *din, const MicroBatch<T> &mb) override;
  double ForwardFlops(int64_t, int64_t) const override { return 0.0; }
  std::vector<Buffer<T> *> SavedBuffers() override { return {&out_}; }
  int wte_id() const { return wte_; }

 private:
  GptDims dims_;
  int wte_ = -1, wpe_ = -1;
  Buffer<T> out_;  // [B, T, C]
};

// Pre-LayerNorm transformer block:
//   res2 = x + c_proj(attn(c_attn(ln_1(x))));  out = res2 + mlp.c_proj(gelu(mlp.c_fc(ln_2(res2))))
template <typename T>
class GptBlock final : public Layer<T> {
 public:
  GptBlock(const GptDims &dims, int index, ParamRegistry &registry);
  std::string_view Kind() const override { return "gpt_block"; }
  int64_t OutWidth() const override { return dims_.d_model; }
  void Reserve(const ActivationLimits &limits, MemoryTracker *tracker) override;
  int64_t ScratchSize(const ActivationLimits &limits) const override;
  const T *Forward(const T *in, const MicroBatch<T> &mb) override;
  void Backward(T *dout, T *din, const MicroBatch<T> &mb) override;
  double ForwardFlops(int64_t B, int64_t seq) const override;
  std::vector<Buffer<T> *> SavedBuffers() override {
    return {&ln1_, &qkv_, &att_, &atty_, &res2_, &ln2_, &fch_, &fch_gelu_, &out_};
  }

 private:
  GptDims dims_;
  int ln1_w_, ln1_b_, attn_w_, attn_b_, proj_w_, proj_b_;
  int ln2_w_, ln2_b_, fc_w_, fc_b_, fcproj_w_, fcproj_b_;
  const T *in_ = nullptr;  // the block input saved by Forward (previous layer's output)
  Buffer<T> ln1_, ln1_mean_, ln1_rstd_;  // [N, C], [N], [N]
  Buffer<T> qkv_;                        // [N, 3C]
  Buffer<T> att_;                        // [B, H, T, T] softmax probabilities
  Buffer<T> atty_;                       // [N, C] attention output, heads merged
  Buffer<T> res2_;                       // [N, C] residual after attention
  Buffer<T> ln2_, ln2_mean_, ln2_rstd_;  // [N, C], [N], [N]
  Buffer<T> fch_, fch_gelu_;             // [N, 4C] each
  Buffer<T> out_;                        // [N, C]
};

// ln_f, logits = ln_f(x) wte^T (tied), mean cross-entropy over targets != -1.
template <typename T>
class GptHead final : public Layer<T> {
 public:
  GptHead(const GptDims &dims, int wte_id, ParamRegistry &registry);
  std::string_view Kind() const override { return "gpt_head"; }
  int64_t OutWidth() const override { return 0; }
  void Reserve(const ActivationLimits &limits, MemoryTracker *tracker) override;
  int64_t ScratchSize(const ActivationLimits &limits) const override;
  const T *Forward(const T *in, const MicroBatch<T> &mb) override;
  void Backward(T *dout, T *din, const MicroBatch<T> &mb) override;
  bool IsLoss() const override { return true; }
  double Loss() const override { return loss_; }
  double ForwardFlops(int64_t B, int64_t seq) const override;
  std::vector<Buffer<T> *> SavedBuffers() override { return {&lnf_}; }

 private:
  GptDims dims_;
  int wte_, lnf_w_, lnf_b_;
  const T *in_ = nullptr;
  Buffer<T> lnf_, lnf_mean_, lnf_rstd_;  // [N, C], [N], [N]
  Buffer<T> probs_;                      // [N, V] softmax of the logits
  int64_t counted_ = 0;                  // targets that were not ignored
  double loss_ = 0.0;
};

}  // namespace dst
