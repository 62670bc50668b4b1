#include "core/model/gpt_layers.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/tensor_parallel/sequence_parallel.h"
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
  return {{MaxLocalRows(tp_, limits.max_rows()) * dims_.d_model}};
}

// Sequence-parallel: every row's lookups [N, C], reduce-scattered to this
// rank's rows (forward), or the output gradient's rows gathered (backward).
template <typename T>
int64_t GptEmbedding<T>::ScratchSize(const ActivationLimits &limits) const {
  return tp_.splits_rows() ? limits.max_rows() * dims_.d_model : 0;
}

template <typename T>
void GptEmbedding<T>::Forward(const T *, LayerActivations<T> &act, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t C = dims_.d_model;
  if (tp_.size == 1) {
    k.EmbeddingForward(mb.tokens, p.param(wte_), p.param(wpe_), mb.B, mb.seq, C, act[0]);
    return;
  }
  if (!tp_.splits_rows()) {
    k.EmbeddingLookupRange(mb.tokens, p.param(wte_), first_, rows_, mb.B, mb.seq, C, act[0]);
    Status st = TpWait(tp_, TpAllReduce(tp_, act[0], mb.rows() * C), "token embedding");
    if (!st.ok()) return this->Fail(std::move(st));
    k.AddPositionsToRows(p.param(wpe_), 0, mb.rows(), mb.seq, C, act[0]);
    return;
  }
  const int64_t n = LocalRows(tp_, mb.rows());
  T *whole = mb.scratch;  // [N, C]
  k.EmbeddingLookupRange(mb.tokens, p.param(wte_), first_, rows_, mb.B, mb.seq, C, whole);
  Status st = TpWait(tp_, ReduceScatterRows(tp_, whole, n, C), "token embedding");
  if (!st.ok()) return this->Fail(std::move(st));
  k.Copy(RowsOf(tp_, whole, n, C), n * C, act[0]);
  k.AddPositionsToRows(p.param(wpe_), tp_.rank * n, n, mb.seq, C, act[0]);
}

template <typename T>
void GptEmbedding<T>::Backward(const T *, const LayerActivations<T> &, T *dout, T *,
                               const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  const T *grad = dout;
  if (tp_.splits_rows()) {  // every row's gradient: wpe's is then whole on every rank
    T *whole = mb.scratch;
    const int64_t n = LocalRows(tp_, mb.rows());
    Status st =
        TpWait(tp_, GatherRows(k, tp_, dout, n, dims_.d_model, whole), "embedding gradient");
    if (!st.ok()) return this->Fail(std::move(st));
    grad = whole;
  }
  k.EmbeddingBackward(grad, mb.tokens, mb.B, mb.seq, dims_.d_model, this->store_->grad(wte_),
                      this->store_->grad(wpe_), first_, rows_);
}

template <typename T>
std::vector<SavedTensorSpec> GptEmbedding<T>::DeferredTensors(
    const ActivationLimits &limits) const {
  return {{MaxLocalRows(tp_, limits.max_rows()) * dims_.d_model}};
}

template <typename T>
void GptEmbedding<T>::BackwardInput(const T *, const LayerActivations<T> &, T *dout, T *,
                                    LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  const int64_t n = LocalRows(tp_, mb.rows());
  k.Copy(dout, n * dims_.d_model, deferred[0]);
}

template <typename T>
void GptEmbedding<T>::BackwardWeight(const T *in, const LayerActivations<T> &act,
                                     const LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
  Backward(in, act, deferred[0], nullptr, mb);  // sequence-parallel: gathers the rows first
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
  // Every GEMM reading these passes their bf16 copies (p.param16).
  for (int w : {attn_w_, proj_w_, fc_w_, fcproj_w_}) registry.MarkBf16GemmWeight(w);
}

// Sequence-parallel: the row-wise tensors (output, LayerNorms, residual)
// hold this rank's n rows; the tensor-parallel region's hold all N.
template <typename T>
std::vector<SavedTensorSpec> GptBlock<T>::SavedTensors(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = dims_.d_model, Cl = c_local_;
  const int64_t n = MaxLocalRows(tp_, N);
  std::vector<SavedTensorSpec> saved(kNumSaved);
  saved[kOut] = {n * C};
  saved[kLn1] = {n * C, false, false, ModuleType::kLayerNorm};
  saved[kLn1Mean] = {n, true, false, ModuleType::kLayerNorm};
  saved[kLn1Rstd] = {n, true, false, ModuleType::kLayerNorm};
  saved[kQkv] = {N * 3 * Cl, false, false, ModuleType::kAttention};
  const int64_t probabilities = limits.attention_probabilities ? limits.max_T * limits.max_T : 0;
  saved[kAtt] = {limits.max_B * (dims_.n_head / tp_.size) * probabilities, false, true,
                 ModuleType::kAttention};
  saved[kAttY] = {N * Cl, false, false, ModuleType::kAttention};
  saved[kRes2] = {n * C};
  saved[kLn2] = {n * C, false, false, ModuleType::kLayerNorm};
  saved[kLn2Mean] = {n, true, false, ModuleType::kLayerNorm};
  saved[kLn2Rstd] = {n, true, false, ModuleType::kLayerNorm};
  saved[kFch] = {N * f_local_, false, false, ModuleType::kLinear};
  saved[kFchGelu] = {N * f_local_, false, false, ModuleType::kLinear};
  if (!tp_.splits_rows()) {  // (sequence parallelism gathers ln_1, ln_2 in fp32)
    for (Saved t : {kLn1, kQkv, kAtt, kAttY}) saved[t].operand_of = ModuleType::kAttention;
    // (and the GELU input, read by the GELU backward in bf16)
    for (Saved t : {kLn2, kFch, kFchGelu}) saved[t].operand_of = ModuleType::kLinear;
    // Written in bf16 alone by LayerNorm, the softmax, GELU; qkv, the
    // attention output and the GELU input by GEMMs in fp32 into the forward's
    // scratch, rounded into the stash by the attention, the projection and
    // GELU that read them.
    for (Saved t : {kLn1, kQkv, kAtt, kAttY, kLn2, kFch, kFchGelu}) saved[t].bf16_alone = true;
  }
  return saved;
}

// Backward workspace: d_fch [N,4C] | d_ln [N,C] | dqkv [N,3C] | attention [threads,T,T]
// | LayerNorm partial sums [threads, 2C] (forward: qkv [N, 3C'] | the attention
// output [N, C'], later the GELU input [N, 4C'], in fp32 when only their bf16
// copies are kept); sequence-parallel, before them:
// the gathered output gradient [N, C] | a gathered LayerNorm output [N, C],
// and after them the LayerNorms' parameter gradients [4C] (forward: the
// gathered LayerNorm output [N, C] | a row-parallel GEMM's partial sums [N, C]).
template <typename T>
int64_t GptBlock<T>::ScratchSize(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = dims_.d_model;
  const int64_t plain =
      N * 8 * C + int64_t(limits.max_threads) *
                      ((limits.attention_probabilities ? limits.max_T * limits.max_T : 0) + 2 * C);
  return tp_.splits_rows() ? 2 * N * C + plain + 4 * C : plain;
}

template <typename T>
bool GptBlock<T>::Finish(std::unique_ptr<Work> work, const char *what) {
  Status st = TpWait(tp_, std::move(work), what);
  if (st.ok()) return true;
  this->Fail(std::move(st));
  return false;
}

template <typename T>
bool GptBlock<T>::SumRowParallel(T *out, const T *bias, const MicroBatch<T> &mb) {
  const int64_t N = mb.rows();
  const Kernels<T> &k = *mb.kernels;
  if (tp_.size == 1) return true;
  const int64_t C = dims_.d_model;
  if (!Finish(TpAllReduce(tp_, out, N * C), "attention / MLP output projection")) return false;
  k.AddBiasToRows(bias, N, C, out);
  return true;
}

// dy [N, C] (attn.c_proj's output gradient, all N rows) -> attn.c_proj's
// weight gradients (+=) and the attention core's backward into dqkv
// [N, 3C'] (c_attn's output gradient); d_ln holds the attention output's
// gradient [N, C'] after.
template <typename T>
void GptBlock<T>::AttentionBranchBackward(const T *dy, const LayerActivations<T> &a, T *d_ln,
                                          T *dqkv, T *att_scratch, const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const Kernels<T> &k = *mb.kernels;
  const int64_t N = mb.rows(), C = dims_.d_model, Cl = c_local_;
  const ComputeType compute = mb.ComputeOf(ModuleType::kAttention);
  k.LinearBackwardStashed(dy, a[kAttY], a.Bf16(kAttY), p.param(proj_w_), p.param16(proj_w_), N, Cl,
                          C, d_ln, p.grad(proj_w_), p.grad(proj_b_), compute);
  k.AttentionBackwardStashed(d_ln, a[kQkv], a.Bf16(kQkv), a[kAtt], a.Bf16(kAtt), Attention(mb),
                             dqkv, att_scratch, compute);
}

template <typename T>
bool GptBlock<T>::ColumnParallelBackward(const T *dy, const T *x, const uint16_t *x16, int w, int b,
                                         int64_t in, int64_t out, T *dx, ComputeType compute,
                                         const MicroBatch<T> &mb, const char *what) {
  ParamStore<T> &p = *this->store_;
  const Kernels<T> &k = *mb.kernels;
  const int64_t N = mb.rows();
  if (tp_.size == 1) {
    k.LinearBackwardStashed(dy, x, x16, p.param(w), p.param16(w), N, in, out, dx, p.grad(w),
                            p.grad(b), compute);
    return true;
  }
  k.LinearBackwardStashed(dy, nullptr, nullptr, p.param(w), p.param16(w), N, in, out, dx, nullptr,
                          nullptr, compute);
  std::unique_ptr<Work> sum = SumInputGradient(dx, N);  // while the weights' GEMM runs
  k.LinearWeightBackwardStashed(dy, x, x16, N, in, out, p.grad(w), p.grad(b), compute);
  return Finish(std::move(sum), what);
}

template <typename T>
std::unique_ptr<Work> GptBlock<T>::SumInputGradient(T *din, int64_t N) {
  return TpAllReduce(tp_, din, N * dims_.d_model);
}

template <typename T>
void GptBlock<T>::Forward(const T *in, LayerActivations<T> &a, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  if (tp_.splits_rows()) return ForwardSequenceParallel(in, a, mb);
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model, Cl = c_local_, F = f_local_;
  T *out = a[kOut];
  // The tensors only the GEMMs read are written in bf16 alone where the store
  // keeps them so (LayerActivations::only16; a[i] is then null). The GEMMs
  // write qkv, the attention output and the GELU input in fp32: into the
  // scratch then, and their readers round them into the stash.
  T *qkv = a.Only16(kQkv) ? mb.scratch : a[kQkv];                   // [N, 3C']
  T *att_y = a.Only16(kAttY) ? mb.scratch + N * 3 * Cl : a[kAttY];  // [N, C']
  T *fch = a.Only16(kFch) ? mb.scratch : a[kFch];  // [N, F'] (qkv, att_y read by then)
  k.LayerNormForwardStashing(in, p.param(ln1_w_), p.param(ln1_b_), N, C, a.Fp32(kLn1),
                             a.Bf16Only(kLn1), a[kLn1Mean], a[kLn1Rstd]);
  k.LinearForwardStashing(a.Fp32(kLn1), a.Bf16(kLn1), p.param(attn_w_), p.param16(attn_w_),
                          p.param(attn_b_), N, C, 3 * Cl, qkv,
                          mb.ComputeOf(ModuleType::kAttention));
  k.AttentionForwardStashing(qkv, a.Bf16(kQkv), Attention(mb), a.Fp32(kAtt), a.Bf16(kAtt), att_y,
                             mb.ComputeOf(ModuleType::kAttention));
  // attention projection into the output (as scratch), then the first residual
  k.LinearForwardStashing(att_y, a.Bf16(kAttY), p.param(proj_w_), p.param16(proj_w_),
                          GemmBias(proj_b_), N, Cl, C, out, mb.ComputeOf(ModuleType::kAttention));
  if (!SumRowParallel(out, p.param(proj_b_), mb)) return;
  k.AddLayerNormForward(in, out, a[kRes2], p.param(ln2_w_), p.param(ln2_b_), N, C, a.Fp32(kLn2),
                        a.Bf16Only(kLn2), a[kLn2Mean], a[kLn2Rstd]);
  k.LinearForwardStashing(a.Fp32(kLn2), a.Bf16(kLn2), p.param(fc_w_), p.param16(fc_w_),
                          p.param(fc_b_), N, C, F, fch, mb.ComputeOf(ModuleType::kLinear));
  k.GeluForwardStashing(fch, N * F, a.Fp32(kFchGelu), a.Bf16Only(kFchGelu), a.Bf16Only(kFch));
  k.LinearForwardStashing(a.Fp32(kFchGelu), a.Bf16(kFchGelu), p.param(fcproj_w_),
                          p.param16(fcproj_w_), GemmBias(fcproj_b_), N, F, C, out,
                          mb.ComputeOf(ModuleType::kLinear));
  if (!SumRowParallel(out, p.param(fcproj_b_), mb)) return;
  k.AddInPlace(a[kRes2], N * C, out);
}

// Sequence-parallel forward: in, out, the LayerNorms and the residual are
// this rank's n rows; the LayerNorm outputs are gathered into the regions,
// the row-parallel GEMMs' partial sums reduce-scattered out of them.
template <typename T>
void GptBlock<T>::ForwardSequenceParallel(const T *in, LayerActivations<T> &a,
                                          const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = dims_.d_model, Cl = c_local_,
                F = f_local_;
  T *whole = mb.scratch;       // [N, C] a LayerNorm output, every rank's rows
  T *partial = whole + N * C;  // [N, C] a row-parallel GEMM's partial sums
  k.LayerNormForward(in, p.param(ln1_w_), p.param(ln1_b_), n, C, a[kLn1], a[kLn1Mean], a[kLn1Rstd]);
  if (!Finish(GatherRows(k, tp_, a[kLn1], n, C, whole), "attention input (all-gather)")) return;
  k.LinearForwardStashing(whole, nullptr, p.param(attn_w_), p.param16(attn_w_), p.param(attn_b_), N,
                          C, 3 * Cl, a[kQkv], mb.ComputeOf(ModuleType::kAttention));
  k.AttentionForward(a[kQkv], Attention(mb), a[kAtt], a[kAttY],
                     mb.ComputeOf(ModuleType::kAttention));
  k.LinearForwardStashing(a[kAttY], nullptr, p.param(proj_w_), p.param16(proj_w_), nullptr, N, Cl,
                          C, partial, mb.ComputeOf(ModuleType::kAttention));
  if (!Finish(ReduceScatterRows(tp_, partial, n, C), "attention output (reduce-scatter)")) return;
  T *rows = RowsOf(tp_, partial, n, C);  // this rank's rows of the sum
  k.AddBiasToRows(p.param(proj_b_), n, C, rows);
  k.Add(in, rows, n * C, a[kRes2]);
  k.LayerNormForward(a[kRes2], p.param(ln2_w_), p.param(ln2_b_), n, C, a[kLn2], a[kLn2Mean],
                     a[kLn2Rstd]);
  if (!Finish(GatherRows(k, tp_, a[kLn2], n, C, whole), "MLP input (all-gather)")) return;
  k.LinearForwardStashing(whole, nullptr, p.param(fc_w_), p.param16(fc_w_), p.param(fc_b_), N, C, F,
                          a[kFch], mb.ComputeOf(ModuleType::kLinear));
  k.GeluForward(a[kFch], N * F, a[kFchGelu]);
  k.LinearForwardStashing(a[kFchGelu], nullptr, p.param(fcproj_w_), p.param16(fcproj_w_), nullptr,
                          N, F, C, partial, mb.ComputeOf(ModuleType::kLinear));
  if (!Finish(ReduceScatterRows(tp_, partial, n, C), "MLP output (reduce-scatter)")) return;
  k.AddBiasToRows(p.param(fcproj_b_), n, C, rows);
  k.Add(rows, a[kRes2], n * C, a[kOut]);
}

// Sequence-parallel backward: the output gradient's rows are gathered before
// each row-parallel GEMM (whose bias gradient is then whole on every rank),
// each column-parallel input gradient reduce-scattered to this rank's rows
// while the weight-gradient GEMM runs on the re-gathered LayerNorm output,
// and the LayerNorms' parameter gradients, from this rank's rows, summed over
// the group at the end.
template <typename T>
void GptBlock<T>::BackwardSequenceParallel(const T *in, const LayerActivations<T> &a, T *dout,
                                           T *din, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = dims_.d_model, Cl = c_local_,
                F = f_local_;
  T *d_whole = mb.scratch;                                                  // [N, C]
  T *gathered = d_whole + N * C;                                            // [N, C]
  T *d_fch = gathered + N * C;                                              // [N, 4C']
  T *d_ln = d_fch + N * 4 * C;                                              // [N, C]
  T *dqkv = d_ln + N * C;                                                   // [N, 3C']
  T *att_scratch = dqkv + N * 3 * C;                                        // [threads, T, T]
  T *ln_scratch = att_scratch + int64_t(mb.max_threads) * mb.seq * mb.seq;  // [threads, 2C]
  T *ln_grads = ln_scratch + int64_t(mb.max_threads) * 2 * C;  // [4C] ln_1 w, b, ln_2 w, b
  k.Zero(4 * C, ln_grads);

  // MLP branch; dout doubles as the gradient of res2 (residual).
  if (!Finish(GatherRows(k, tp_, dout, n, C, d_whole), "MLP output gradient (all-gather)")) return;
  std::unique_ptr<Work> gather = GatherRows(k, tp_, a[kLn2], n, C, gathered);
  k.LinearBackwardStashed(d_whole, a[kFchGelu], nullptr, p.param(fcproj_w_), p.param16(fcproj_w_),
                          N, F, C, d_fch, p.grad(fcproj_w_), p.grad(fcproj_b_),
                          mb.ComputeOf(ModuleType::kLinear));
  k.GeluBackward(d_fch, a[kFch], N * F, d_fch);
  k.LinearBackwardStashed(d_fch, nullptr, nullptr, p.param(fc_w_), p.param16(fc_w_), N, C, F, d_ln,
                          nullptr, nullptr, mb.ComputeOf(ModuleType::kLinear));
  std::unique_ptr<Work> sum = ReduceScatterRows(tp_, d_ln, n, C);
  if (!Finish(std::move(gather), "MLP input (all-gather)")) return;
  k.LinearWeightBackward(d_fch, gathered, N, C, F, p.grad(fc_w_), p.grad(fc_b_),
                         mb.ComputeOf(ModuleType::kLinear));
  if (!Finish(std::move(sum), "MLP input gradient (reduce-scatter)")) return;
  k.LayerNormBackward(RowsOf(tp_, d_ln, n, C), a[kRes2], p.param(ln2_w_), a[kLn2Mean], a[kLn2Rstd],
                      n, C, dout, ln_grads + 2 * C, ln_grads + 3 * C, ln_scratch, mb.max_threads);
  // Attention branch; the residual passes dout (now d res2) straight to din.
  if (!Finish(GatherRows(k, tp_, dout, n, C, d_whole), "attention output gradient (all-gather)"))
    return;
  gather = GatherRows(k, tp_, a[kLn1], n, C, gathered);
  AttentionBranchBackward(d_whole, a, d_ln, dqkv, att_scratch, mb);
  k.LinearBackwardStashed(dqkv, nullptr, nullptr, p.param(attn_w_), p.param16(attn_w_), N, C,
                          3 * Cl, d_ln, nullptr, nullptr, mb.ComputeOf(ModuleType::kAttention));
  sum = ReduceScatterRows(tp_, d_ln, n, C);
  if (!Finish(std::move(gather), "attention input (all-gather)")) return;
  k.LinearWeightBackward(dqkv, gathered, N, C, 3 * Cl, p.grad(attn_w_), p.grad(attn_b_),
                         mb.ComputeOf(ModuleType::kAttention));
  if (!Finish(std::move(sum), "attention input gradient (reduce-scatter)")) return;
  if (!din)
    din = dout;  // first layer: the input gradient is not needed, but ln_1's is
  else
    k.Copy(dout, n * C, din);
  k.LayerNormBackward(RowsOf(tp_, d_ln, n, C), in, p.param(ln1_w_), a[kLn1Mean], a[kLn1Rstd], n, C,
                      din, ln_grads, ln_grads + C, ln_scratch, mb.max_threads);
  if (!Finish(TpAllReduce(tp_, ln_grads, 4 * C), "LayerNorm weight gradients (all-reduce)")) return;
  const int ids[4] = {ln1_w_, ln1_b_, ln2_w_, ln2_b_};
  for (int i = 0; i < 4; ++i) k.AddInPlace(ln_grads + i * C, C, p.grad(ids[i]));
}

template <typename T>
void GptBlock<T>::Backward(const T *in, const LayerActivations<T> &a, T *dout, T *din,
                           const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  if (tp_.splits_rows()) return BackwardSequenceParallel(in, a, dout, din, mb);
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model, Cl = c_local_, F = f_local_;
  T *d_fch = mb.scratch;                                                    // [N, 4C']
  T *d_ln = d_fch + N * 4 * C;                                              // [N, C]
  T *dqkv = d_ln + N * C;                                                   // [N, 3C']
  T *att_scratch = dqkv + N * 3 * C;                                        // [threads, T, T]
  T *ln_scratch = att_scratch + int64_t(mb.max_threads) * mb.seq * mb.seq;  // [threads, 2C]

  // MLP branch; dout doubles as the gradient of res2 (residual).
  k.LinearBackwardStashed(dout, a[kFchGelu], a.Bf16(kFchGelu), p.param(fcproj_w_),
                          p.param16(fcproj_w_), N, F, C, d_fch, p.grad(fcproj_w_),
                          p.grad(fcproj_b_), mb.ComputeOf(ModuleType::kLinear));
  if (tp_.size == 1) {  // GELU's backward feeding c_fc's in one pass (d_fch not kept)
    k.GeluLinearBackwardStashed(d_fch, a[kFch], a.Bf16Only(kFch), a[kLn2], a.Bf16(kLn2),
                                p.param(fc_w_), p.param16(fc_w_), N, C, F, d_ln, p.grad(fc_w_),
                                p.grad(fc_b_), mb.ComputeOf(ModuleType::kLinear));
  } else {
    k.GeluBackwardStashed(d_fch, a[kFch], a.Bf16Only(kFch), N * F, d_fch);
    if (!ColumnParallelBackward(d_fch, a[kLn2], a.Bf16(kLn2), fc_w_, fc_b_, C, F, d_ln,
                                mb.ComputeOf(ModuleType::kLinear), mb, "MLP input gradient"))
      return;
  }
  k.LayerNormBackward(d_ln, a[kRes2], p.param(ln2_w_), a[kLn2Mean], a[kLn2Rstd], N, C, dout,
                      p.grad(ln2_w_), p.grad(ln2_b_), ln_scratch, mb.max_threads);
  // Attention branch; the residual passes dout (now d res2) straight to din.
  AttentionBranchBackward(dout, a, d_ln, dqkv, att_scratch, mb);
  if (!ColumnParallelBackward(dqkv, a[kLn1], a.Bf16(kLn1), attn_w_, attn_b_, C, 3 * Cl, d_ln,
                              mb.ComputeOf(ModuleType::kAttention), mb, "attention input gradient"))
    return;
  if (!din)
    din = dout;  // first layer: the input gradient is not needed, but ln_1's is
  else
    k.Copy(dout, N * C, din);
  k.LayerNormBackward(d_ln, in, p.param(ln1_w_), a[kLn1Mean], a[kLn1Rstd], N, C, din,
                      p.grad(ln1_w_), p.grad(ln1_b_), ln_scratch, mb.max_threads);
}

// Sequence-parallel: the LayerNorms' output gradients hold this rank's rows;
// the row-parallel GEMMs' output gradients are kept gathered (all N rows).
template <typename T>
std::vector<SavedTensorSpec> GptBlock<T>::DeferredTensors(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), n = MaxLocalRows(tp_, N), C = dims_.d_model;
  std::vector<SavedTensorSpec> deferred(kNumDeferred);
  deferred[kDOut] = {N * C};
  deferred[kDFch] = {N * f_local_};
  deferred[kDLn2] = {n * C};
  deferred[kDRes2] = {N * C};
  deferred[kDQkv] = {N * 3 * c_local_};
  deferred[kDLn1] = {n * C};
  return deferred;
}

// Backward's chain of input gradients, each intermediate gradient a weight
// reads kept in `d` (the same GEMMs as Backward, without the weight ones).
// Sequence-parallel input half: the output gradients gathered into the
// deferred kDOut / kDRes2 (the weight half reads them whole), the
// column-parallel input gradients reduce-scattered, their rows kept.
template <typename T>
void GptBlock<T>::BackwardInputSequenceParallel(const T *in, const LayerActivations<T> &a, T *dout,
                                                T *din, LayerActivations<T> &d,
                                                const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = dims_.d_model, Cl = c_local_,
                F = f_local_;
  T *partial = mb.scratch;                                                  // [N, C]
  T *d_att = partial + N * C;                                               // [N, C']
  T *att_scratch = d_att + N * C;                                           // [threads, T, T]
  T *ln_scratch = att_scratch + int64_t(mb.max_threads) * mb.seq * mb.seq;  // [threads, 2C]
  if (!Finish(GatherRows(k, tp_, dout, n, C, d[kDOut]), "MLP output gradient (all-gather)")) return;
  k.LinearBackwardStashed(d[kDOut], nullptr, nullptr, p.param(fcproj_w_), p.param16(fcproj_w_), N,
                          F, C, d[kDFch], nullptr, nullptr, mb.ComputeOf(ModuleType::kLinear));
  k.GeluBackward(d[kDFch], a[kFch], N * F, d[kDFch]);
  k.LinearBackwardStashed(d[kDFch], nullptr, nullptr, p.param(fc_w_), p.param16(fc_w_), N, C, F,
                          partial, nullptr, nullptr, mb.ComputeOf(ModuleType::kLinear));
  if (!Finish(ReduceScatterRows(tp_, partial, n, C), "MLP input gradient (reduce-scatter)")) return;
  k.Copy(RowsOf(tp_, partial, n, C), n * C, d[kDLn2]);
  k.LayerNormBackward(d[kDLn2], a[kRes2], p.param(ln2_w_), a[kLn2Mean], a[kLn2Rstd], n, C, dout,
                      nullptr, nullptr, ln_scratch, mb.max_threads);
  if (!Finish(GatherRows(k, tp_, dout, n, C, d[kDRes2]), "attention output gradient (all-gather)"))
    return;
  k.LinearBackwardStashed(d[kDRes2], nullptr, nullptr, p.param(proj_w_), p.param16(proj_w_), N, Cl,
                          C, d_att, nullptr, nullptr, mb.ComputeOf(ModuleType::kAttention));
  k.AttentionBackward(d_att, a[kQkv], a[kAtt], Attention(mb), d[kDQkv], att_scratch,
                      mb.ComputeOf(ModuleType::kAttention));
  k.LinearBackwardStashed(d[kDQkv], nullptr, nullptr, p.param(attn_w_), p.param16(attn_w_), N, C,
                          3 * Cl, partial, nullptr, nullptr, mb.ComputeOf(ModuleType::kAttention));
  if (!Finish(ReduceScatterRows(tp_, partial, n, C), "attention input gradient (reduce-scatter)"))
    return;
  k.Copy(RowsOf(tp_, partial, n, C), n * C, d[kDLn1]);
  if (!din)
    din = dout;
  else
    k.Copy(dout, n * C, din);
  k.LayerNormBackward(d[kDLn1], in, p.param(ln1_w_), a[kLn1Mean], a[kLn1Rstd], n, C, din, nullptr,
                      nullptr, ln_scratch, mb.max_threads);
}

// Sequence-parallel weight half: the LayerNorm outputs gathered again for
// the column-parallel weight gradients; the LayerNorms' parameter gradients
// from this rank's rows, summed over the group.
template <typename T>
void GptBlock<T>::BackwardWeightSequenceParallel(const T *in, const LayerActivations<T> &a,
                                                 const LayerActivations<T> &d,
                                                 const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = dims_.d_model, Cl = c_local_,
                F = f_local_;
  T *gathered = mb.scratch;                                    // [N, C]
  T *ln_scratch = gathered + N * C;                            // [threads, 2C]
  T *ln_grads = ln_scratch + int64_t(mb.max_threads) * 2 * C;  // [4C] ln_1 w, b, ln_2 w, b
  k.Zero(4 * C, ln_grads);
  k.LinearWeightBackward(d[kDOut], a[kFchGelu], N, F, C, p.grad(fcproj_w_), p.grad(fcproj_b_),
                         mb.ComputeOf(ModuleType::kLinear));
  if (!Finish(GatherRows(k, tp_, a[kLn2], n, C, gathered), "MLP input (all-gather)")) return;
  k.LinearWeightBackward(d[kDFch], gathered, N, C, F, p.grad(fc_w_), p.grad(fc_b_),
                         mb.ComputeOf(ModuleType::kLinear));
  k.LayerNormParamBackward(d[kDLn2], a[kRes2], a[kLn2Mean], a[kLn2Rstd], n, C, ln_grads + 2 * C,
                           ln_grads + 3 * C, ln_scratch, mb.max_threads);
  k.LinearWeightBackward(d[kDRes2], a[kAttY], N, Cl, C, p.grad(proj_w_), p.grad(proj_b_),
                         mb.ComputeOf(ModuleType::kAttention));
  if (!Finish(GatherRows(k, tp_, a[kLn1], n, C, gathered), "attention input (all-gather)")) return;
  k.LinearWeightBackward(d[kDQkv], gathered, N, C, 3 * Cl, p.grad(attn_w_), p.grad(attn_b_),
                         mb.ComputeOf(ModuleType::kAttention));
  k.LayerNormParamBackward(d[kDLn1], in, a[kLn1Mean], a[kLn1Rstd], n, C, ln_grads, ln_grads + C,
                           ln_scratch, mb.max_threads);
  if (!Finish(TpAllReduce(tp_, ln_grads, 4 * C), "LayerNorm weight gradients (all-reduce)")) return;
  const int ids[4] = {ln1_w_, ln1_b_, ln2_w_, ln2_b_};
  for (int i = 0; i < 4; ++i) k.AddInPlace(ln_grads + i * C, C, p.grad(ids[i]));
}

template <typename T>
void GptBlock<T>::BackwardInput(const T *in, const LayerActivations<T> &a, T *dout, T *din,
                                LayerActivations<T> &d, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  if (tp_.splits_rows()) return BackwardInputSequenceParallel(in, a, dout, din, d, mb);
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model, Cl = c_local_, F = f_local_;
  T *d_att = mb.scratch;                                                    // [N, C']
  T *att_scratch = d_att + N * C;                                           // [threads, T, T]
  T *ln_scratch = att_scratch + int64_t(mb.max_threads) * mb.seq * mb.seq;  // [threads, 2C]
  k.Copy(dout, N * C, d[kDOut]);
  k.LinearBackwardStashed(dout, nullptr, nullptr, p.param(fcproj_w_), p.param16(fcproj_w_), N, F, C,
                          d[kDFch], nullptr, nullptr, mb.ComputeOf(ModuleType::kLinear));
  k.GeluBackwardStashed(d[kDFch], a[kFch], a.Bf16Only(kFch), N * F, d[kDFch]);
  k.LinearBackwardStashed(d[kDFch], nullptr, nullptr, p.param(fc_w_), p.param16(fc_w_), N, C, F,
                          d[kDLn2], nullptr, nullptr, mb.ComputeOf(ModuleType::kLinear));
  if (!Finish(SumInputGradient(d[kDLn2], N), "MLP input gradient")) return;
  k.LayerNormBackward(d[kDLn2], a[kRes2], p.param(ln2_w_), a[kLn2Mean], a[kLn2Rstd], N, C, dout,
                      nullptr, nullptr, ln_scratch, mb.max_threads);
  k.Copy(dout, N * C, d[kDRes2]);
  k.LinearBackwardStashed(dout, nullptr, nullptr, p.param(proj_w_), p.param16(proj_w_), N, Cl, C,
                          d_att, nullptr, nullptr, mb.ComputeOf(ModuleType::kAttention));
  k.AttentionBackwardStashed(d_att, a[kQkv], a.Bf16(kQkv), a[kAtt], a.Bf16(kAtt), Attention(mb),
                             d[kDQkv], att_scratch, mb.ComputeOf(ModuleType::kAttention));
  k.LinearBackwardStashed(d[kDQkv], nullptr, nullptr, p.param(attn_w_), p.param16(attn_w_), N, C,
                          3 * Cl, d[kDLn1], nullptr, nullptr, mb.ComputeOf(ModuleType::kAttention));
  if (!Finish(SumInputGradient(d[kDLn1], N), "attention input gradient")) return;
  if (!din)
    din = dout;
  else
    k.Copy(dout, N * C, din);
  k.LayerNormBackward(d[kDLn1], in, p.param(ln1_w_), a[kLn1Mean], a[kLn1Rstd], N, C, din, nullptr,
                      nullptr, ln_scratch, mb.max_threads);
}

template <typename T>
void GptBlock<T>::BackwardWeight(const T *in, const LayerActivations<T> &a,
                                 const LayerActivations<T> &d, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  if (tp_.splits_rows()) return BackwardWeightSequenceParallel(in, a, d, mb);
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model, Cl = c_local_, F = f_local_;
  T *ln_scratch = mb.scratch;  // [threads, 2C]
  k.LinearWeightBackwardStashed(d[kDOut], a[kFchGelu], a.Bf16(kFchGelu), N, F, C, p.grad(fcproj_w_),
                                p.grad(fcproj_b_), mb.ComputeOf(ModuleType::kLinear));
  k.LinearWeightBackwardStashed(d[kDFch], a[kLn2], a.Bf16(kLn2), N, C, F, p.grad(fc_w_),
                                p.grad(fc_b_), mb.ComputeOf(ModuleType::kLinear));
  k.LayerNormParamBackward(d[kDLn2], a[kRes2], a[kLn2Mean], a[kLn2Rstd], N, C, p.grad(ln2_w_),
                           p.grad(ln2_b_), ln_scratch, mb.max_threads);
  k.LinearWeightBackwardStashed(d[kDRes2], a[kAttY], a.Bf16(kAttY), N, Cl, C, p.grad(proj_w_),
                                p.grad(proj_b_), mb.ComputeOf(ModuleType::kAttention));
  k.LinearWeightBackwardStashed(d[kDQkv], a[kLn1], a.Bf16(kLn1), N, C, 3 * Cl, p.grad(attn_w_),
                                p.grad(attn_b_), mb.ComputeOf(ModuleType::kAttention));
  k.LayerNormParamBackward(d[kDLn1], in, a[kLn1Mean], a[kLn1Rstd], N, C, p.grad(ln1_w_),
                           p.grad(ln1_b_), ln_scratch, mb.max_threads);
}

// The attention core once more; its output (already saved as kAttY) goes to
// the backward workspace, which is free until the backward starts. Where qkv
// is kept in bf16 alone, from that copy (the values the forward multiplied).
template <typename T>
void GptBlock<T>::RecomputeSaved(const T *, LayerActivations<T> &a, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  const ComputeType compute = mb.ComputeOf(ModuleType::kAttention);
  if (a.Only16(kQkv))
    k.AttentionForwardStashing(nullptr, a.Bf16(kQkv), Attention(mb), a[kAtt], nullptr, mb.scratch,
                               compute);
  else
    k.AttentionForward(a[kQkv], Attention(mb), a[kAtt], mb.scratch, compute);
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

// Sequence-parallel: ln_f's tensors hold this rank's rows; the logits all N.
template <typename T>
std::vector<SavedTensorSpec> GptHead<T>::SavedTensors(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), n = MaxLocalRows(tp_, N), C = dims_.d_model;
  std::vector<SavedTensorSpec> saved(kNumSaved);
  saved[kLnf] = {n * C, false, false, ModuleType::kLayerNorm};
  saved[kLnfMean] = {n, true, false, ModuleType::kLayerNorm};
  saved[kLnfRstd] = {n, true, false, ModuleType::kLayerNorm};
  saved[kProbs] = {N * vocab_, true};
  return saved;
}

// Backward workspace: dlogits [N, V'] | d_lnf [N, C] | LayerNorm partial sums
// [threads, 2C] | sequence-parallel: ln_f's gathered output [N, C] | ln_f's
// parameter gradients [2C]. Forward (vocab-parallel): the cross-entropy's
// [tp + 2, N], after (sequence-parallel) ln_f's gathered output [N, C].
template <typename T>
int64_t GptHead<T>::ScratchSize(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = dims_.d_model;
  const int64_t sp = tp_.splits_rows() ? N * C + 2 * C : 0;
  return std::max(N * (vocab_ + C) + int64_t(limits.max_threads) * 2 * C + sp, (tp_.size + 2) * N);
}

template <typename T>
void GptHead<T>::Forward(const T *in, LayerActivations<T> &a, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = dims_.d_model;
  k.LayerNormForward(in, p.param(lnf_w_), p.param(lnf_b_), n, C, a[kLnf], a[kLnfMean], a[kLnfRstd]);
  const T *x = a[kLnf];  // [N, C] every row (sequence-parallel: gathered)
  if (tp_.splits_rows()) {
    Status st =
        TpWait(tp_, GatherRows(k, tp_, a[kLnf], n, C, mb.scratch), "LM head input (all-gather)");
    if (!st.ok()) return this->Fail(std::move(st));
    x = mb.scratch;
  }
  k.LinearForwardStashing(x, nullptr, p.param(wte_), p.param16(wte_), nullptr, N, C, vocab_,
                          a[kProbs], mb.ComputeOf(ModuleType::kEmbedding));
  if (tp_.size == 1) {
    a.loss = k.SoftmaxCrossEntropyForward(a[kProbs], mb.targets, N, vocab_, &a.counted);
    return;
  }
  Status st = VocabParallelCrossEntropy(k, tp_, a[kProbs], mb.targets, N, vocab_, first_,
                                        mb.scratch, &a.loss, &a.counted);
  if (!st.ok()) this->Fail(std::move(st));
}

template <typename T>
void GptHead<T>::LogitsGradient(const LayerActivations<T> &a, const MicroBatch<T> &mb,
                                T *dlogits) const {
  const Kernels<T> &k = *mb.kernels;
  k.SoftmaxCrossEntropyBackward(a[kProbs], mb.targets, mb.rows(), vocab_, a.counted, mb.grad_scale,
                                dlogits, first_);
}

template <typename T>
bool GptHead<T>::LnfGradient(const LayerActivations<T> &a, const T *dlogits, T *d_lnf, bool weights,
                             const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const Kernels<T> &k = *mb.kernels;
  const int64_t N = mb.rows(), C = dims_.d_model;
  const ComputeType compute = mb.ComputeOf(ModuleType::kEmbedding);
  k.LinearBackwardStashed(dlogits, nullptr, nullptr, p.param(wte_), p.param16(wte_), N, C, vocab_,
                          d_lnf, nullptr, nullptr, compute);
  std::unique_ptr<Work> sum = TpAllReduce(tp_, d_lnf, N * C);  // while the wte GEMM runs
  if (weights)
    k.LinearWeightBackward(dlogits, a[kLnf], N, C, vocab_, p.grad(wte_), nullptr, compute);
  Status st = TpWait(tp_, std::move(sum), "LM head input gradient");
  if (st.ok()) return true;
  this->Fail(std::move(st));
  return false;
}

// Sequence-parallel: d_lnf's partial sums reduce-scattered to this rank's
// rows while the wte gradient's GEMM runs on ln_f's re-gathered output; ln_f's
// parameter gradients, from this rank's rows, summed over the group (the
// final LayerNorm too: Megatron #1446).
template <typename T>
void GptHead<T>::BackwardSequenceParallel(const T *in, const LayerActivations<T> &a, T *din,
                                          const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = dims_.d_model;
  T *dlogits = mb.scratch;                                     // [N, V']
  T *d_lnf = dlogits + N * vocab_;                             // [N, C]
  T *ln_scratch = d_lnf + N * C;                               // [threads, 2C]
  T *gathered = ln_scratch + int64_t(mb.max_threads) * 2 * C;  // [N, C]
  T *ln_grads = gathered + N * C;                              // [2C] weight, bias
  LogitsGradient(a, mb, dlogits);
  k.LinearBackwardStashed(dlogits, nullptr, nullptr, p.param(wte_), p.param16(wte_), N, C, vocab_,
                          d_lnf, nullptr, nullptr, mb.ComputeOf(ModuleType::kEmbedding));
  std::unique_ptr<Work> sum = ReduceScatterRows(tp_, d_lnf, n, C);
  std::unique_ptr<Work> gather = GatherRows(k, tp_, a[kLnf], n, C, gathered);
  Status st = TpWait(tp_, std::move(gather), "LM head input (all-gather)");
  if (st.ok()) {
    k.LinearWeightBackward(dlogits, gathered, N, C, vocab_, p.grad(wte_), nullptr,
                           mb.ComputeOf(ModuleType::kEmbedding));
    st = TpWait(tp_, std::move(sum), "LM head input gradient (reduce-scatter)");
  }
  if (!st.ok()) return this->Fail(std::move(st));
  k.Zero(n * C, din);
  k.Zero(2 * C, ln_grads);
  k.LayerNormBackward(RowsOf(tp_, d_lnf, n, C), in, p.param(lnf_w_), a[kLnfMean], a[kLnfRstd], n, C,
                      din, ln_grads, ln_grads + C, ln_scratch, mb.max_threads);
  st = TpWait(tp_, TpAllReduce(tp_, ln_grads, 2 * C), "final LayerNorm gradients (all-reduce)");
  if (!st.ok()) return this->Fail(std::move(st));
  k.AddInPlace(ln_grads, C, p.grad(lnf_w_));
  k.AddInPlace(ln_grads + C, C, p.grad(lnf_b_));
}

template <typename T>
void GptHead<T>::Backward(const T *in, const LayerActivations<T> &a, T *, T *din,
                          const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  if (tp_.splits_rows()) return BackwardSequenceParallel(in, a, din, mb);
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model;
  T *dlogits = mb.scratch;          // [N, V']
  T *d_lnf = dlogits + N * vocab_;  // [N, C]
  T *ln_scratch = d_lnf + N * C;    // [threads, 2C]
  LogitsGradient(a, mb, dlogits);
  if (!LnfGradient(a, dlogits, d_lnf, /*weights=*/true, mb)) return;
  k.Zero(N * C, din);
  k.LayerNormBackward(d_lnf, in, p.param(lnf_w_), a[kLnfMean], a[kLnfRstd], N, C, din,
                      p.grad(lnf_w_), p.grad(lnf_b_), ln_scratch, mb.max_threads);
}

template <typename T>
std::vector<SavedTensorSpec> GptHead<T>::DeferredTensors(const ActivationLimits &limits) const {
  return {{MaxLocalRows(tp_, limits.max_rows()) * dims_.d_model}};
}

template <typename T>
void GptHead<T>::BackwardInput(const T *in, const LayerActivations<T> &a, T *, T *din,
                               LayerActivations<T> &d, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = dims_.d_model;
  T *dlogits = mb.scratch;                     // [N, V']
  T *d_lnf = dlogits + N * vocab_;             // [N, C] (sequence-parallel: the partial sums)
  T *ln_scratch = dlogits + N * (vocab_ + C);  // [threads, 2C]
  LogitsGradient(a, mb, dlogits);
  if (tp_.splits_rows()) {  // reduce-scattered; this rank's rows kept for the weight half
    k.LinearBackwardStashed(dlogits, nullptr, nullptr, p.param(wte_), p.param16(wte_), N, C, vocab_,
                            d_lnf, nullptr, nullptr, mb.ComputeOf(ModuleType::kEmbedding));
    Status st = TpWait(tp_, ReduceScatterRows(tp_, d_lnf, n, C), "LM head input gradient");
    if (!st.ok()) return this->Fail(std::move(st));
    k.Copy(RowsOf(tp_, d_lnf, n, C), n * C, d[0]);
  } else if (!LnfGradient(a, dlogits, d[0], /*weights=*/false, mb)) {
    return;
  }
  k.Zero(n * C, din);
  k.LayerNormBackward(d[0], in, p.param(lnf_w_), a[kLnfMean], a[kLnfRstd], n, C, din, nullptr,
                      nullptr, ln_scratch, mb.max_threads);
}

// The logits' gradient again (an element-wise pass over the probabilities,
// far cheaper than keeping [N, V'] per micro-batch), then the weights'.
template <typename T>
void GptHead<T>::BackwardWeight(const T *in, const LayerActivations<T> &a,
                                const LayerActivations<T> &d, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), C = dims_.d_model;
  T *dlogits = mb.scratch;                     // [N, V']
  T *ln_scratch = dlogits + N * (vocab_ + C);  // [threads, 2C]
  LogitsGradient(a, mb, dlogits);
  if (tp_.splits_rows()) return WeightGradientsSequenceParallel(in, a, d, mb, dlogits);
  k.LinearWeightBackward(dlogits, a[kLnf], N, C, vocab_, p.grad(wte_), nullptr,
                         mb.ComputeOf(ModuleType::kEmbedding));
  k.LayerNormParamBackward(d[0], in, a[kLnfMean], a[kLnfRstd], N, C, p.grad(lnf_w_), p.grad(lnf_b_),
                           ln_scratch, mb.max_threads);
}

// Sequence-parallel weight half: wte's gradient from ln_f's re-gathered
// output, ln_f's from this rank's rows, summed over the group (#1446).
template <typename T>
void GptHead<T>::WeightGradientsSequenceParallel(const T *in, const LayerActivations<T> &a,
                                                 const LayerActivations<T> &d,
                                                 const MicroBatch<T> &mb, const T *dlogits) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = dims_.d_model;
  T *ln_scratch = mb.scratch + N * (vocab_ + C);               // [threads, 2C]
  T *gathered = ln_scratch + int64_t(mb.max_threads) * 2 * C;  // [N, C]
  T *ln_grads = gathered + N * C;                              // [2C] weight, bias
  Status st =
      TpWait(tp_, GatherRows(k, tp_, a[kLnf], n, C, gathered), "LM head input (all-gather)");
  if (!st.ok()) return this->Fail(std::move(st));
  k.LinearWeightBackward(dlogits, gathered, N, C, vocab_, p.grad(wte_), nullptr,
                         mb.ComputeOf(ModuleType::kEmbedding));
  k.Zero(2 * C, ln_grads);
  k.LayerNormParamBackward(d[0], in, a[kLnfMean], a[kLnfRstd], n, C, ln_grads, ln_grads + C,
                           ln_scratch, mb.max_threads);
  st = TpWait(tp_, TpAllReduce(tp_, ln_grads, 2 * C), "final LayerNorm gradients (all-reduce)");
  if (!st.ok()) return this->Fail(std::move(st));
  k.AddInPlace(ln_grads, C, p.grad(lnf_w_));
  k.AddInPlace(ln_grads + C, C, p.grad(lnf_b_));
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
