#include "core/model/gpt_layers.h"

#include <algorithm>
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
#include "core/tensor_parallel/tp_comm.h"
#include "core/tensor_parallel/vocab_parallel.h"

namespace dst {

namespace {
constexpr double kInitStd = 0.02;  // GPT-2

std::string BlockName(int index, const char *suffix) {
  return "transformer.h." + std::to_string(index) + "." + suffix;
}
}  // namespace

// ---------------------------------------------------------------- embedding

template <typename T>
GptEmbedding<T>::GptEmbedding(const GptDims &dims, ParamRegistry &registry,
                              const TensorParallelGroup &tp)
    : dims_(dims), tp_(tp), first_(tp.rank * (dims.vocab / tp.size)), rows_(dims.vocab / tp.size) {
  wte_ = registry.Add("transformer.wte.weight", {dims.vocab, dims.d_model},
                      ParamInit::Normal(kInitStd), TensorSplit{0, tp.size, tp.rank});
  wpe_ = registry.Add("transformer.wpe.weight", {dims.n_ctx, dims.d_model},
                      ParamInit::Normal(kInitStd));
}

template <typename T>
std::vector<SavedTensorSpec> GptEmbedding<T>::SavedTensors(const ActivationLimits &limits) const {
  return {{limits.max_rows() * dims_.d_model}};
}

template <typename T>
void GptEmbedding<T>::Forward(const T *, LayerActivations<T> &act, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t C = dims_.d_model;
  if (tp_.size == 1) {
    cpu::EmbeddingForward(mb.tokens, p.param(wte_), p.param(wpe_), mb.B, mb.seq, C, act[0]);
    return;
  }
  cpu::EmbeddingLookupRange(mb.tokens, p.param(wte_), first_, rows_, mb.B, mb.seq, C, act[0]);
  Status st = TpWait(TpAllReduce(tp_, act[0], mb.rows() * C), "token embedding");
  if (!st.ok()) return this->Fail(std::move(st));
  cpu::AddPositions(p.param(wpe_), mb.B, mb.seq, C, act[0]);
}

template <typename T>
void GptEmbedding<T>::Backward(const T *, const LayerActivations<T> &, T *dout, T *,
                               const MicroBatch<T> &mb) {
  cpu::EmbeddingBackward(dout, mb.tokens, mb.B, mb.seq, dims_.d_model, this->store_->grad(wte_),
                         this->store_->grad(wpe_), first_, rows_);
}

template <typename T>
std::vector<SavedTensorSpec> GptEmbedding<T>::DeferredTensors(
    const ActivationLimits &limits) const {
  return {{limits.max_rows() * dims_.d_model}};
}

template <typename T>
void GptEmbedding<T>::BackwardInput(const T *, const LayerActivations<T> &, T *dout, T *,
                                    LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
  std::memcpy(deferred[0], dout, size_t(mb.rows() * dims_.d_model) * sizeof(T));
}

template <typename T>
void GptEmbedding<T>::BackwardWeight(const T *, const LayerActivations<T> &,
                                     const LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
  cpu::EmbeddingBackward(deferred[0], mb.tokens, mb.B, mb.seq, dims_.d_model,
                         this->store_->grad(wte_), this->store_->grad(wpe_), first_, rows_);
}

// ---------------------------------------------------------------- block

template <typename T>
GptBlock<T>::GptBlock(const GptDims &dims, int index, ParamRegistry &registry,
                      const TensorParallelGroup &tp)
    : dims_(dims), tp_(tp), c_local_(dims.d_model / tp.size), f_local_(4 * dims.d_model / tp.size) {
  const int64_t C = dims.d_model;
  // GPT-2: residual projections scaled by 1/sqrt(2 * n_layer).
  const double proj_std = kInitStd / std::sqrt(2.0 * double(dims.n_layer));
  const TensorSplit rows{0, tp.size, tp.rank}, columns{1, tp.size, tp.rank};
  const TensorSplit qkv_rows{0, tp.size, tp.rank, 3};  // this rank's heads of q, k and v
  ln1_w_ = registry.Add(BlockName(index, "ln_1.weight"), {C}, ParamInit::Constant(1));
  ln1_b_ = registry.Add(BlockName(index, "ln_1.bias"), {C}, ParamInit::Constant(0));
  attn_w_ = registry.Add(BlockName(index, "attn.c_attn.weight"), {3 * C, C},
                         ParamInit::Normal(kInitStd), qkv_rows);
  attn_b_ =
      registry.Add(BlockName(index, "attn.c_attn.bias"), {3 * C}, ParamInit::Constant(0), qkv_rows);
  proj_w_ = registry.Add(BlockName(index, "attn.c_proj.weight"), {C, C},
                         ParamInit::Normal(proj_std), columns);
  proj_b_ = registry.Add(BlockName(index, "attn.c_proj.bias"), {C}, ParamInit::Constant(0));
  ln2_w_ = registry.Add(BlockName(index, "ln_2.weight"), {C}, ParamInit::Constant(1));
  ln2_b_ = registry.Add(BlockName(index, "ln_2.bias"), {C}, ParamInit::Constant(0));
  fc_w_ = registry.Add(BlockName(index, "mlp.c_fc.weight"), {4 * C, C}, ParamInit::Normal(kInitStd),
                       rows);
  fc_b_ = registry.Add(BlockName(index, "mlp.c_fc.bias"), {4 * C}, ParamInit::Constant(0), rows);
  fcproj_w_ = registry.Add(BlockName(index, "mlp.c_proj.weight"), {C, 4 * C},
                           ParamInit::Normal(proj_std), columns);
  fcproj_b_ = registry.Add(BlockName(index, "mlp.c_proj.bias"), {C}, ParamInit::Constant(0));
}

template <typename T>
std::vector<SavedTensorSpec> GptBlock<T>::SavedTensors(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = dims_.d_model, Cl = c_local_;
  std::vector<SavedTensorSpec> saved(kNumSaved);
  saved[kOut] = {N * C};
  saved[kLn1] = {N * C};
  saved[kLn1Mean] = {N, true};
  saved[kLn1Rstd] = {N, true};
  saved[kQkv] = {N * 3 * Cl};
  saved[kAtt] = {limits.max_B * (dims_.n_head / tp_.size) * limits.max_T * limits.max_T, false,
                 true};
  saved[kAttY] = {N * Cl};
  saved[kRes2] = {N * C};
  saved[kLn2] = {N * C};
  saved[kLn2Mean] = {N, true};
  saved[kLn2Rstd] = {N, true};
  saved[kFch] = {N * f_local_};
  saved[kFchGelu] = {N * f_local_};
  return saved;
}

// Backward workspace: d_fch [N,4C] | d_ln [N,C] | dqkv [N,3C] | attention [threads,T,T]
// | LayerNorm partial sums [threads, 2C].
template <typename T>
int64_t GptBlock<T>::ScratchSize(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = dims_.d_model;
  return N * 8 * C + int64_t(limits.max_threads) * (limits.max_T * limits.max_T + 2 * C);
}

template <typename T>
bool GptBlock<T>::Finish(std::unique_ptr<Work> work, const char *what) {
  Status st = TpWait(std::move(work), what);
  if (st.ok()) return true;
  this->Fail(std::move(st));
  return false;
}

template <typename T>
bool GptBlock<T>::SumRowParallel(T *out, const T *bias, int64_t N) {
  if (tp_.size == 1) return true;
  const int64_t C = dims_.d_model;
  if (!Finish(TpAllReduce(tp_, out, N * C), "attention / MLP output projection")) return false;
  cpu::AddBiasToRows(bias, N, C, out);
  return true;
}

template <typename T>
std::unique_ptr<Work> GptBlock<T>::SumInputGradient(T *din, int64_t N) {
  return TpAllReduce(tp_, din, N * dims_.d_model);
}

template <typename T>
void GptBlock<T>::Forward(const T *in, LayerActivations<T> &a, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model, Cl = c_local_, F = f_local_;
  T *out = a[kOut];
  cpu::LayerNormForward(in, p.param(ln1_w_), p.param(ln1_b_), N, C, a[kLn1], a[kLn1Mean],
                        a[kLn1Rstd]);
  cpu::LinearForward(a[kLn1], p.param(attn_w_), p.param(attn_b_), N, C, 3 * Cl, a[kQkv]);
  cpu::AttentionForward(a[kQkv], Attention(mb), a[kAtt], a[kAttY]);
  // attention projection into the output (as scratch), then the first residual
  cpu::LinearForward(a[kAttY], p.param(proj_w_), GemmBias(proj_b_), N, Cl, C, out);
  if (!SumRowParallel(out, p.param(proj_b_), N)) return;
  cpu::Add(in, out, N * C, a[kRes2]);
  cpu::LayerNormForward(a[kRes2], p.param(ln2_w_), p.param(ln2_b_), N, C, a[kLn2], a[kLn2Mean],
                        a[kLn2Rstd]);
  cpu::LinearForward(a[kLn2], p.param(fc_w_), p.param(fc_b_), N, C, F, a[kFch]);
  cpu::GeluForward(a[kFch], N * F, a[kFchGelu]);
  cpu::LinearForward(a[kFchGelu], p.param(fcproj_w_), GemmBias(fcproj_b_), N, F, C, out);
  if (!SumRowParallel(out, p.param(fcproj_b_), N)) return;
  cpu::AddInPlace(a[kRes2], N * C, out);
}

template <typename T>
void GptBlock<T>::Backward(const T *in, const LayerActivations<T> &a, T *dout, T *din,
                           const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model, Cl = c_local_, F = f_local_;
  T *d_fch = mb.scratch;                                                    // [N, 4C']
  T *d_ln = d_fch + N * 4 * C;                                              // [N, C]
  T *dqkv = d_ln + N * C;                                                   // [N, 3C']
  T *att_scratch = dqkv + N * 3 * C;                                        // [threads, T, T]
  T *ln_scratch = att_scratch + int64_t(mb.max_threads) * mb.seq * mb.seq;  // [threads, 2C]

  // MLP branch; dout doubles as the gradient of res2 (residual).
  cpu::LinearBackward(dout, a[kFchGelu], p.param(fcproj_w_), N, F, C, d_fch, p.grad(fcproj_w_),
                      p.grad(fcproj_b_));
  cpu::GeluBackward(d_fch, a[kFch], N * F, d_fch);
  cpu::LinearBackward<T>(d_fch, nullptr, p.param(fc_w_), N, C, F, d_ln, nullptr, nullptr);
  std::unique_ptr<Work> sum = SumInputGradient(d_ln, N);  // while the weights' GEMM runs
  cpu::LinearWeightBackward(d_fch, a[kLn2], N, C, F, p.grad(fc_w_), p.grad(fc_b_));
  if (!Finish(std::move(sum), "MLP input gradient")) return;
  cpu::LayerNormBackward(d_ln, a[kRes2], p.param(ln2_w_), a[kLn2Mean], a[kLn2Rstd], N, C, dout,
                         p.grad(ln2_w_), p.grad(ln2_b_), ln_scratch, mb.max_threads);
  // Attention branch; the residual passes dout (now d res2) straight to din.
  cpu::LinearBackward(dout, a[kAttY], p.param(proj_w_), N, Cl, C, d_ln, p.grad(proj_w_),
                      p.grad(proj_b_));
  cpu::AttentionBackward(d_ln, a[kQkv], a[kAtt], Attention(mb), dqkv, att_scratch);
  cpu::LinearBackward<T>(dqkv, nullptr, p.param(attn_w_), N, C, 3 * Cl, d_ln, nullptr, nullptr);
  sum = SumInputGradient(d_ln, N);
  cpu::LinearWeightBackward(dqkv, a[kLn1], N, C, 3 * Cl, p.grad(attn_w_), p.grad(attn_b_));
  if (!Finish(std::move(sum), "attention input gradient")) return;
  if (!din)
    din = dout;  // first layer: the input gradient is not needed, but ln_1's is
  else
    std::memcpy(din, dout, size_t(N * C) * sizeof(T));
  cpu::LayerNormBackward(d_ln, in, p.param(ln1_w_), a[kLn1Mean], a[kLn1Rstd], N, C, din,
                         p.grad(ln1_w_), p.grad(ln1_b_), ln_scratch, mb.max_threads);
}

template <typename T>
std::vector<SavedTensorSpec> GptBlock<T>::DeferredTensors(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = dims_.d_model;
  std::vector<SavedTensorSpec> deferred(kNumDeferred);
  deferred[kDOut] = {N * C};
  deferred[kDFch] = {N * f_local_};
  deferred[kDLn2] = {N * C};
  deferred[kDRes2] = {N * C};
  deferred[kDQkv] = {N * 3 * c_local_};
  deferred[kDLn1] = {N * C};
  return deferred;
}

// Backward's chain of input gradients, each intermediate gradient a weight
// reads kept in `d` (the same GEMMs as Backward, without the weight ones).
template <typename T>
void GptBlock<T>::BackwardInput(const T *in, const LayerActivations<T> &a, T *dout, T *din,
                                LayerActivations<T> &d, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model, Cl = c_local_, F = f_local_;
  const size_t row_bytes = size_t(N * C) * sizeof(T);
  T *d_att = mb.scratch;                                                    // [N, C']
  T *att_scratch = d_att + N * C;                                           // [threads, T, T]
  T *ln_scratch = att_scratch + int64_t(mb.max_threads) * mb.seq * mb.seq;  // [threads, 2C]
  std::memcpy(d[kDOut], dout, row_bytes);
  cpu::LinearBackward<T>(dout, nullptr, p.param(fcproj_w_), N, F, C, d[kDFch], nullptr, nullptr);
  cpu::GeluBackward(d[kDFch], a[kFch], N * F, d[kDFch]);
  cpu::LinearBackward<T>(d[kDFch], nullptr, p.param(fc_w_), N, C, F, d[kDLn2], nullptr, nullptr);
  if (!Finish(SumInputGradient(d[kDLn2], N), "MLP input gradient")) return;
  cpu::LayerNormBackward<T>(d[kDLn2], a[kRes2], p.param(ln2_w_), a[kLn2Mean], a[kLn2Rstd], N, C,
                            dout, nullptr, nullptr, ln_scratch, mb.max_threads);
  std::memcpy(d[kDRes2], dout, row_bytes);
  cpu::LinearBackward<T>(dout, nullptr, p.param(proj_w_), N, Cl, C, d_att, nullptr, nullptr);
  cpu::AttentionBackward(d_att, a[kQkv], a[kAtt], Attention(mb), d[kDQkv], att_scratch);
  cpu::LinearBackward<T>(d[kDQkv], nullptr, p.param(attn_w_), N, C, 3 * Cl, d[kDLn1], nullptr,
                         nullptr);
  if (!Finish(SumInputGradient(d[kDLn1], N), "attention input gradient")) return;
  if (!din)
    din = dout;
  else
    std::memcpy(din, dout, row_bytes);
  cpu::LayerNormBackward<T>(d[kDLn1], in, p.param(ln1_w_), a[kLn1Mean], a[kLn1Rstd], N, C, din,
                            nullptr, nullptr, ln_scratch, mb.max_threads);
}

template <typename T>
void GptBlock<T>::BackwardWeight(const T *in, const LayerActivations<T> &a,
                                 const LayerActivations<T> &d, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model, Cl = c_local_, F = f_local_;
  T *ln_scratch = mb.scratch;  // [threads, 2C]
  cpu::LinearWeightBackward(d[kDOut], a[kFchGelu], N, F, C, p.grad(fcproj_w_), p.grad(fcproj_b_));
  cpu::LinearWeightBackward(d[kDFch], a[kLn2], N, C, F, p.grad(fc_w_), p.grad(fc_b_));
  cpu::LayerNormParamBackward(d[kDLn2], a[kRes2], a[kLn2Mean], a[kLn2Rstd], N, C, p.grad(ln2_w_),
                              p.grad(ln2_b_), ln_scratch, mb.max_threads);
  cpu::LinearWeightBackward(d[kDRes2], a[kAttY], N, Cl, C, p.grad(proj_w_), p.grad(proj_b_));
  cpu::LinearWeightBackward(d[kDQkv], a[kLn1], N, C, 3 * Cl, p.grad(attn_w_), p.grad(attn_b_));
  cpu::LayerNormParamBackward(d[kDLn1], in, a[kLn1Mean], a[kLn1Rstd], N, C, p.grad(ln1_w_),
                              p.grad(ln1_b_), ln_scratch, mb.max_threads);
}

// The attention core once more; its output (already saved as kAttY) goes to
// the backward workspace, which is free until the backward starts.
template <typename T>
void GptBlock<T>::RecomputeSaved(const T *, LayerActivations<T> &a, const MicroBatch<T> &mb) {
  cpu::AttentionForward(a[kQkv], Attention(mb), a[kAtt], mb.scratch);
}

// This rank's share: its heads and its slices of the linears.
template <typename T>
double GptBlock<T>::ForwardFlops(int64_t B, int64_t seq) const {
  const double N = double(B * seq), C = double(dims_.d_model), Cl = double(c_local_);
  const double linear = 2.0 * N * C * (3 * Cl + Cl + 2 * double(f_local_));
  const double attention = 2.0 * 2.0 * double(B) * double(seq) * double(seq) * Cl;  // QK^T and AV
  return linear + attention;
}

// ---------------------------------------------------------------- head

template <typename T>
GptHead<T>::GptHead(const GptDims &dims, int wte_id, ParamRegistry &registry,
                    const TensorParallelGroup &tp)
    : dims_(dims),
      tp_(tp),
      first_(tp.rank * (dims.vocab / tp.size)),
      vocab_(dims.vocab / tp.size),
      wte_(wte_id) {
  // A pipeline's last stage holds its own copy of the tied weight (same name,
  // same initial values, the same vocabulary shard); the engine sums the two
  // copies' gradients.
  if (wte_ < 0)
    wte_ = registry.Add("transformer.wte.weight", {dims.vocab, dims.d_model},
                        ParamInit::Normal(kInitStd), TensorSplit{0, tp.size, tp.rank});
  lnf_w_ = registry.Add("transformer.ln_f.weight", {dims.d_model}, ParamInit::Constant(1));
  lnf_b_ = registry.Add("transformer.ln_f.bias", {dims.d_model}, ParamInit::Constant(0));
}

template <typename T>
std::vector<SavedTensorSpec> GptHead<T>::SavedTensors(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = dims_.d_model;
  std::vector<SavedTensorSpec> saved(kNumSaved);
  saved[kLnf] = {N * C};
  saved[kLnfMean] = {N, true};
  saved[kLnfRstd] = {N, true};
  saved[kProbs] = {N * vocab_, true};
  return saved;
}

// Backward workspace: dlogits [N, V'] | d_lnf [N, C] | LayerNorm partial sums
// [threads, 2C]; forward (vocab-parallel): the cross-entropy's [tp + 2, N].
template <typename T>
int64_t GptHead<T>::ScratchSize(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = dims_.d_model;
  return std::max(N * (vocab_ + C) + int64_t(limits.max_threads) * 2 * C, (tp_.size + 2) * N);
}

template <typename T>
void GptHead<T>::Forward(const T *in, LayerActivations<T> &a, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model;
  cpu::LayerNormForward(in, p.param(lnf_w_), p.param(lnf_b_), N, C, a[kLnf], a[kLnfMean],
                        a[kLnfRstd]);
  cpu::LinearForward<T>(a[kLnf], p.param(wte_), nullptr, N, C, vocab_, a[kProbs]);
  if (tp_.size == 1) {
    a.loss = double(cpu::SoftmaxCrossEntropyForward(a[kProbs], mb.targets, N, vocab_, &a.counted));
    return;
  }
  Status st = VocabParallelCrossEntropy(tp_, a[kProbs], mb.targets, N, vocab_, first_, mb.scratch,
                                        &a.loss, &a.counted);
  if (!st.ok()) this->Fail(std::move(st));
}

template <typename T>
void GptHead<T>::LogitsGradient(const LayerActivations<T> &a, const MicroBatch<T> &mb,
                                T *dlogits) const {
  cpu::SoftmaxCrossEntropyBackward(a[kProbs], mb.targets, mb.rows(), vocab_, a.counted,
                                   mb.grad_scale, dlogits, first_);
}

template <typename T>
bool GptHead<T>::LnfGradient(const LayerActivations<T> &a, const T *dlogits, T *d_lnf, int64_t N,
                             bool weights) {
  ParamStore<T> &p = *this->store_;
  const int64_t C = dims_.d_model;
  cpu::LinearBackward<T>(dlogits, nullptr, p.param(wte_), N, C, vocab_, d_lnf, nullptr, nullptr);
  std::unique_ptr<Work> sum = TpAllReduce(tp_, d_lnf, N * C);  // while the wte GEMM runs
  if (weights) cpu::LinearWeightBackward<T>(dlogits, a[kLnf], N, C, vocab_, p.grad(wte_), nullptr);
  Status st = TpWait(std::move(sum), "LM head input gradient");
  if (st.ok()) return true;
  this->Fail(std::move(st));
  return false;
}

template <typename T>
void GptHead<T>::Backward(const T *in, const LayerActivations<T> &a, T *, T *din,
                          const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model;
  T *dlogits = mb.scratch;          // [N, V']
  T *d_lnf = dlogits + N * vocab_;  // [N, C]
  T *ln_scratch = d_lnf + N * C;    // [threads, 2C]
  LogitsGradient(a, mb, dlogits);
  if (!LnfGradient(a, dlogits, d_lnf, N, /*weights=*/true)) return;
  std::memset(din, 0, size_t(N * C) * sizeof(T));
  cpu::LayerNormBackward(d_lnf, in, p.param(lnf_w_), a[kLnfMean], a[kLnfRstd], N, C, din,
                         p.grad(lnf_w_), p.grad(lnf_b_), ln_scratch, mb.max_threads);
}

template <typename T>
std::vector<SavedTensorSpec> GptHead<T>::DeferredTensors(const ActivationLimits &limits) const {
  return {{limits.max_rows() * dims_.d_model}};
}

template <typename T>
void GptHead<T>::BackwardInput(const T *in, const LayerActivations<T> &a, T *, T *din,
                               LayerActivations<T> &d, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model;
  T *dlogits = mb.scratch;                     // [N, V']
  T *ln_scratch = dlogits + N * (vocab_ + C);  // [threads, 2C]
  LogitsGradient(a, mb, dlogits);
  if (!LnfGradient(a, dlogits, d[0], N, /*weights=*/false)) return;
  std::memset(din, 0, size_t(N * C) * sizeof(T));
  cpu::LayerNormBackward<T>(d[0], in, p.param(lnf_w_), a[kLnfMean], a[kLnfRstd], N, C, din, nullptr,
                            nullptr, ln_scratch, mb.max_threads);
}

// The logits' gradient again (an element-wise pass over the probabilities,
// far cheaper than keeping [N, V'] per micro-batch), then the weights'.
template <typename T>
void GptHead<T>::BackwardWeight(const T *in, const LayerActivations<T> &a,
                                const LayerActivations<T> &d, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model;
  T *dlogits = mb.scratch;                     // [N, V']
  T *ln_scratch = dlogits + N * (vocab_ + C);  // [threads, 2C]
  LogitsGradient(a, mb, dlogits);
  cpu::LinearWeightBackward<T>(dlogits, a[kLnf], N, C, vocab_, p.grad(wte_), nullptr);
  cpu::LayerNormParamBackward(d[0], in, a[kLnfMean], a[kLnfRstd], N, C, p.grad(lnf_w_),
                              p.grad(lnf_b_), ln_scratch, mb.max_threads);
}

template <typename T>
double GptHead<T>::ForwardFlops(int64_t B, int64_t seq) const {
  return 2.0 * double(B * seq) * double(dims_.d_model) * double(vocab_);
}

template class GptEmbedding<float>;
template class GptEmbedding<double>;
template class GptBlock<float>;
template class GptBlock<double>;
template class GptHead<float>;
template class GptHead<double>;

}  // namespace dst
