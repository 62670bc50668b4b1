#include "core/layers/decoder.h"

#include <algorithm>

#include "core/tensor_parallel/sequence_parallel.h"
#include "core/tensor_parallel/tp_comm.h"

namespace dst {

template <typename T>
DecoderLayer<T>::DecoderLayer(const DecoderConfig &config, const DecoderNames &names,
                              ParamRegistry &registry, const TensorParallelGroup &tp)
    : config_(config), kind_(names.kind), tp_(tp) {
  norm1_ = Norm<T>(config.norm, names.norm1, config.d_model, config.norm_eps, registry);
  attention_ = SelfAttention<T>(config.attention, names.attention, tp, registry);
  norm2_ = Norm<T>(config.norm, names.norm2, config.d_model, config.norm_eps, registry);
  mlp_ = Mlp<T>(config.mlp, names.mlp, tp, registry);
}

// Sequence-parallel: the row-wise tensors (output, norms, residual) hold
// this rank's n rows; the tensor-parallel region's hold all N.
template <typename T>
std::vector<SavedTensorSpec> DecoderLayer<T>::SavedTensors(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = config_.d_model, n = MaxLocalRows(tp_, N);
  const int64_t F = mlp_.ffn(), heads = config_.attention.n_head / tp_.size;
  const ModuleType norm = NormModule(), attn = ModuleType::kAttention, lin = ModuleType::kLinear;
  const bool swiglu = mlp_.kind() == MlpKind::kSwiGlu;
  const int64_t means = norm1_.has_mean() ? n : 0;
  std::vector<SavedTensorSpec> saved(kNumSaved);
  saved[kOut] = {n * C};
  saved[kLn1] = {n * C, false, false, norm};
  saved[kLn1Mean] = {means, true, false, norm};
  saved[kLn1Rstd] = {n, true, false, norm};
  saved[kQkv] = {N * attention_.qkv_width(), false, false, attn};
  const int64_t probabilities = limits.attention_probabilities ? limits.max_T * limits.max_T : 0;
  saved[kAtt] = {limits.max_B * heads * probabilities, false, true, attn};
  saved[kAttY] = {N * attention_.q_width(), false, false, attn};
  saved[kRes2] = {n * C};
  saved[kLn2] = {n * C, false, false, norm};
  saved[kLn2Mean] = {means, true, false, norm};
  saved[kLn2Rstd] = {n, true, false, norm};
  saved[kFch] = {N * F, false, false, lin};
  saved[kAct] = {N * F, false, false, lin};
  saved[kUp] = {swiglu ? N * F : 0, false, false, lin};
  if (!tp_.splits_rows()) {  // (sequence parallelism gathers the norm outputs in fp32)
    for (Saved t : {kLn1, kQkv, kAtt, kAttY}) saved[t].operand_of = attn;
    for (Saved t : {kLn2, kAct}) saved[t].operand_of = lin;
    // Written in bf16 alone by the norms, the softmax and the activation;
    // qkv and the attention output by GEMMs in fp32 into the forward's
    // scratch, rounded into the stash by the attention and the projection.
    for (Saved t : {kLn1, kQkv, kAtt, kAttY, kLn2, kAct}) saved[t].bf16_alone = true;
    if (!swiglu) {  // GELU's backward reads its input's bf16 copy (the gate is read in fp32)
      saved[kFch].operand_of = lin;
      saved[kFch].bf16_alone = true;
    }
  }
  return saved;
}

template <typename T>
typename DecoderLayer<T>::ForwardScratch DecoderLayer<T>::CarveForward(ScratchCursor<T> &c,
                                                                       const Dims &d) const {
  const int64_t region = tp_.splits_rows() ? d.N * config_.d_model : 0;
  ForwardScratch s;
  s.whole = c.Take(region);
  s.partial = c.Take(region);
  return s;
}

template <typename T>
typename DecoderLayer<T>::BackwardScratch DecoderLayer<T>::CarveBackward(ScratchCursor<T> &c,
                                                                         const Dims &d) const {
  const int64_t C = config_.d_model, N = d.N, F = mlp_.ffn(), W = attention_.qkv_width();
  const bool sp = tp_.splits_rows(), swiglu = mlp_.kind() == MlpKind::kSwiGlu;
  const bool separate = config_.attention.qkv == QkvLayout::kSeparate;
  BackwardScratch s;
  s.d_whole = c.Take(sp ? N * C : 0);
  s.gathered = c.Take(sp ? N * C : 0);
  s.d_act = c.Take(N * F);
  s.d_up = c.Take(swiglu ? N * F : 0);
  s.d_ln = c.Take(N * std::max(C, attention_.q_width()));
  s.dqkv = c.Take(N * W);
  s.att = c.Take(int64_t(d.threads) * (d.probabilities ? d.seq * d.seq : 0));
  s.ln = c.Take(norm1_.ScratchSize(d.threads));
  s.tmp = c.Take(separate || swiglu ? N * C : 0);
  s.unpacked = c.Take(attention_.UnpackSize(N));
  s.norm_grads = c.Take(sp ? norm1_.grad_size() + norm2_.grad_size() : 0);
  return s;
}

template <typename T>
typename DecoderLayer<T>::BackwardScratch DecoderLayer<T>::BackwardScratchOf(
    const Pass<T> &pass) const {
  ScratchCursor<T> cursor(pass.mb.scratch);
  const BackwardScratch s = CarveBackward(cursor, DimsOf(pass.mb));
  if (tp_.splits_rows()) pass.k().Zero(norm1_.grad_size() + norm2_.grad_size(), s.norm_grads);
  return s;
}

template <typename T>
typename DecoderLayer<T>::Dims DecoderLayer<T>::DimsOf(const MicroBatch<T> &mb) const {
  const AttentionShape shape = attention_.Shape(mb.B, mb.seq);
  return {mb.rows(), mb.seq, mb.max_threads, mb.kernels->KeepsAttentionProbabilities(shape)};
}

// Forward: a sequence-parallel region's gathered input and partial sums,
// then the attention's fp32 tensors kept in bf16 alone (qkv, its output;
// separate projections: one projection's output) or, later, the MLP's (the
// GELU input). Backward: CarveBackward. Recomputation: the attention output.
template <typename T>
int64_t DecoderLayer<T>::ScratchSize(const ActivationLimits &limits) const {
  const Dims d{limits.max_rows(), limits.max_T, limits.max_threads,
               limits.attention_probabilities};
  const int64_t N = d.N, W = attention_.qkv_width(), Q = attention_.q_width();
  const bool separate = config_.attention.qkv == QkvLayout::kSeparate;
  const int64_t widest_projection = separate ? std::max(Q, (W - Q) / 2) : 0;
  ScratchCursor<T> forward, backward;
  CarveForward(forward, d);
  const int64_t blocks = std::max(N * (W + Q + widest_projection), N * mlp_.ffn());
  CarveBackward(backward, d);
  return std::max({forward.used() + blocks, backward.used(), N * Q});
}

template <typename T>
void DecoderLayer<T>::Forward(const T *in, LayerActivations<T> &a, const MicroBatch<T> &mb) {
  const Pass<T> pass{mb, *this->store_};
  const Kernels<T> &k = pass.k();
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = config_.d_model;
  ScratchCursor<T> cursor(mb.scratch);
  const ForwardScratch s = CarveForward(cursor, DimsOf(mb));
  // A row split writes its partial sums into the output (into the scratch
  // under sequence parallelism: the output holds this rank's rows only).
  T *sums = tp_.splits_rows() ? s.partial : a[kOut];
  T *rows = nullptr;
  Operand<T> x;
  // attention
  norm1_.Forward(pass, in, n, Norm1Saved(a));
  if (!Check(GatherRegionInput(pass, tp_, a.Op(kLn1), N, C, s.whole, &x, "attention input")))
    return;
  ScratchCursor<T> attention_scratch = cursor;
  attention_.Forward(pass, x, AttnSaved(a), sums, attention_scratch);
  if (!Check(SumRowParallel(pass, tp_, sums, N, C, attention_.output().SummedBias(pass.p), &rows,
                            "attention output")))
    return;
  // MLP
  norm2_.AddForward(pass, in, rows, a[kRes2], n, Norm2Saved(a));
  if (!Check(GatherRegionInput(pass, tp_, a.Op(kLn2), N, C, s.whole, &x, "MLP input"))) return;
  ScratchCursor<T> mlp_scratch = cursor;
  mlp_.Forward(pass, x, MlpSavedOf(a), sums, mlp_scratch);
  if (!Check(SumRowParallel(pass, tp_, sums, N, C, mlp_.output().SummedBias(pass.p), &rows,
                            "MLP output")))
    return;
  if (rows == a[kOut])
    k.AddInPlace(a[kRes2], n * C, a[kOut]);
  else
    k.Add(rows, a[kRes2], n * C, a[kOut]);
}

template <typename T>
const T *DecoderLayer<T>::WholeGradient(const Pass<T> &pass, const T *dout, T *whole, bool copy,
                                        const char *what) {
  const int64_t N = pass.mb.rows(), C = config_.d_model;
  if (tp_.splits_rows()) {
    Status st = TpWait(tp_, GatherRows(pass.k(), tp_, dout, LocalRows(tp_, N), C, whole),
                       (std::string(what) + " (all-gather)").c_str());
    return Check(std::move(st)) ? whole : nullptr;
  }
  if (!copy) return dout;
  pass.k().Copy(dout, N * C, whole);
  return whole;
}

template <typename T>
bool DecoderLayer<T>::SumNormGrads(const Pass<T> &pass, T *grads) {
  if (!tp_.splits_rows()) return true;
  const int64_t g1 = norm1_.grad_size(), g2 = norm2_.grad_size();
  if (!Check(TpWait(tp_, TpAllReduce(tp_, grads, g1 + g2), "norm weight gradients (all-reduce)")))
    return false;
  norm1_.AddGrads(pass, grads);
  norm2_.AddGrads(pass, grads + g1);
  return true;
}

// The output gradient's rows are gathered before each row split (whose bias
// gradient is then whole on every rank); each column split's input gradient
// is summed (reduce-scattered to this rank's rows) while its weight
// gradients run; the norms' parameter gradients of a rank's rows are summed
// over the group at the end.
template <typename T>
void DecoderLayer<T>::Backward(const T *in, const LayerActivations<T> &a, T *dout, T *din,
                               const MicroBatch<T> &mb) {
  const Pass<T> pass{mb, *this->store_};
  const Kernels<T> &k = pass.k();
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = config_.d_model;
  const BackwardScratch s = BackwardScratchOf(pass);
  const bool sp = tp_.splits_rows();
  T *grads2 = sp ? s.norm_grads + norm1_.grad_size() : nullptr;
  T *d_rows = nullptr;
  // MLP; dout doubles as the gradient of res2 (the residual).
  const T *dy = WholeGradient(pass, dout, s.d_whole, false, "MLP output gradient");
  if (!dy) return;
  if (!Check(mlp_.Backward(pass, tp_, dy, MlpSavedOf(a), RegionOf(a, kLn2, s.gathered), s.d_act,
                           s.d_up, s.d_ln, s.tmp, true, &d_rows)))
    return;
  norm2_.Backward(pass, d_rows, a[kRes2], Norm2Saved(a), n, dout, true, grads2, s.ln);
  // Attention; the residual passes dout (now d res2) straight to din.
  dy = WholeGradient(pass, dout, s.d_whole, false, "attention output gradient");
  if (!dy) return;
  attention_.OutputBackward(pass, dy, AttnSaved(a), s.d_ln, true);
  attention_.CoreBackward(pass, s.d_ln, AttnSaved(a), s.dqkv, s.att);
  if (!Check(ColumnParallelBackward(pass, tp_, attention_.InputParts(pass, s.dqkv, s.unpacked),
                                    RegionOf(a, kLn1, s.gathered), s.d_ln, s.tmp, true,
                                    mb.ComputeOf(ModuleType::kAttention), &d_rows,
                                    "attention input gradient")))
    return;
  if (!din)
    din = dout;  // first layer: the input gradient is not needed, but norm1's are
  else
    k.Copy(dout, n * C, din);
  norm1_.Backward(pass, d_rows, in, Norm1Saved(a), n, din, true, sp ? s.norm_grads : nullptr, s.ln);
  SumNormGrads(pass, s.norm_grads);
}

// Sequence-parallel: the norms' output gradients hold this rank's rows; the
// row splits' output gradients are kept gathered (all N rows).
template <typename T>
std::vector<SavedTensorSpec> DecoderLayer<T>::DeferredTensors(
    const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), n = MaxLocalRows(tp_, N), C = config_.d_model;
  std::vector<SavedTensorSpec> deferred(kNumDeferred);
  deferred[kDOut] = {N * C};
  deferred[kDFch] = {N * mlp_.ffn()};
  deferred[kDLn2] = {n * C};
  deferred[kDRes2] = {N * C};
  deferred[kDQkv] = {N * attention_.qkv_width()};
  deferred[kDLn1] = {n * C};
  deferred[kDUp] = {mlp_.kind() == MlpKind::kSwiGlu ? N * mlp_.ffn() : 0};
  return deferred;
}

// Backward's chain of input gradients; each gradient a weight reads is kept
// in `d` (the same GEMMs as Backward, without the weight ones).
template <typename T>
void DecoderLayer<T>::BackwardInput(const T *in, const LayerActivations<T> &a, T *dout, T *din,
                                    LayerActivations<T> &d, const MicroBatch<T> &mb) {
  const Pass<T> pass{mb, *this->store_};
  const Kernels<T> &k = pass.k();
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = config_.d_model;
  const BackwardScratch s = BackwardScratchOf(pass);
  const bool sp = tp_.splits_rows();
  T *d_rows = nullptr;
  // MLP
  const T *dy = WholeGradient(pass, dout, d[kDOut], true, "MLP output gradient");
  if (!dy) return;
  if (!Check(mlp_.Backward(pass, tp_, dy, MlpSavedOf(a), RegionOf(a, kLn2, s.gathered), d[kDFch],
                           d[kDUp], sp ? s.d_ln : d[kDLn2], s.tmp, false, &d_rows)))
    return;
  if (sp) k.Copy(d_rows, n * C, d[kDLn2]);
  norm2_.Backward(pass, d[kDLn2], a[kRes2], Norm2Saved(a), n, dout, false, nullptr, s.ln);
  // Attention
  dy = WholeGradient(pass, dout, d[kDRes2], true, "attention output gradient");
  if (!dy) return;
  attention_.OutputBackward(pass, dy, AttnSaved(a), s.d_ln, false);
  attention_.CoreBackward(pass, s.d_ln, AttnSaved(a), d[kDQkv], s.att);
  if (!Check(ColumnParallelBackward(pass, tp_, attention_.InputParts(pass, d[kDQkv], s.unpacked),
                                    RegionOf(a, kLn1, s.gathered), sp ? s.d_ln : d[kDLn1], s.tmp,
                                    false, mb.ComputeOf(ModuleType::kAttention), &d_rows,
                                    "attention input gradient")))
    return;
  if (sp) k.Copy(d_rows, n * C, d[kDLn1]);
  if (!din)
    din = dout;
  else
    k.Copy(dout, n * C, din);
  norm1_.Backward(pass, d[kDLn1], in, Norm1Saved(a), n, din, false, nullptr, s.ln);
}

template <typename T>
void DecoderLayer<T>::BackwardWeight(const T *in, const LayerActivations<T> &a,
                                     const LayerActivations<T> &d, const MicroBatch<T> &mb) {
  const Pass<T> pass{mb, *this->store_};
  const int64_t n = LocalRows(tp_, mb.rows());
  const BackwardScratch s = BackwardScratchOf(pass);
  const bool sp = tp_.splits_rows();
  if (!Check(mlp_.WeightBackward(pass, tp_, d[kDOut], MlpSavedOf(a), RegionOf(a, kLn2, s.gathered),
                                 d[kDFch], d[kDUp])))
    return;
  norm2_.WeightBackward(pass, d[kDLn2], a[kRes2], Norm2Saved(a), n,
                        sp ? s.norm_grads + norm1_.grad_size() : nullptr, s.ln);
  attention_.output().WeightBackward(pass, d[kDRes2], a.Op(kAttY), mb.rows(),
                                     mb.ComputeOf(ModuleType::kAttention));
  if (!Check(ColumnParallelWeightBackward(pass, tp_, attention_.InputParts(pass, d[kDQkv], s.unpacked),
                                          RegionOf(a, kLn1, s.gathered),
                                          mb.ComputeOf(ModuleType::kAttention), "attention input")))
    return;
  norm1_.WeightBackward(pass, d[kDLn1], in, Norm1Saved(a), n, sp ? s.norm_grads : nullptr, s.ln);
  SumNormGrads(pass, s.norm_grads);
}

// The attention core once more; its output (already saved) goes to the
// scratch, which is free until the backward starts.
template <typename T>
void DecoderLayer<T>::RecomputeSaved(const T *, LayerActivations<T> &a, const MicroBatch<T> &mb) {
  attention_.RecomputeProbabilities(Pass<T>{mb, *this->store_}, AttnSaved(a), mb.scratch);
}

// This rank's share: its heads and its slices of the linears.
template <typename T>
double DecoderLayer<T>::ForwardFlops(int64_t B, int64_t seq) const {
  const double N = double(B * seq), C = double(config_.d_model);
  const double W = double(attention_.qkv_width()), Q = double(attention_.q_width());
  const double mlp = (mlp_.kind() == MlpKind::kSwiGlu ? 3.0 : 2.0) * double(mlp_.ffn());
  const double linear = 2.0 * N * C * (W + Q + mlp);
  const double attention = 2.0 * 2.0 * double(B) * double(seq) * double(seq) * Q;  // QK^T and AV
  return linear + attention;
}

template class DecoderLayer<float>;
template class DecoderLayer<double>;

}  // namespace dst
