#include "core/layers/lm_head.h"

#include <algorithm>
#include <limits>

#include "core/tensor_parallel/sequence_parallel.h"
#include "core/tensor_parallel/tp_comm.h"
#include "core/tensor_parallel/vocab_parallel.h"

namespace dst {

template <typename T>
LmHead<T>::LmHead(const LmHeadConfig &config, const LmHeadNames &names, bool tied, int tied_wte,
                  ParamRegistry &registry, const TensorParallelGroup &tp)
    : config_(config),
      kind_(names.kind),
      tp_(tp),
      tied_(tied),
      first_(tp.rank * (config.Held() / tp.size)),
      vocab_(config.Held() / tp.size),
      valid_(std::clamp<int64_t>(config.vocab - first_, 0, vocab_)) {
  const int64_t C = config.d_model;
  // A pipeline's last stage holds its own copy of a tied weight (same name,
  // same initial values, the same vocabulary shard).
  if (tied && tied_wte < 0)
    tied_wte = registry.Add(names.weight + ".weight", {config.vocab, C}, config.init,
                            TensorSplit{0, tp.size, tp.rank, 1, config.Padding()});
  norm_ = Norm<T>(config.norm, names.norm, C, config.norm_eps, registry);
  using Split = typename ParallelLinear<T>::Split;
  output_ = tied ? ParallelLinear<T>::TiedColumn(tied_wte, C, vocab_, tp.size > 1)
                 : ParallelLinear<T>(Split::kColumn, names.weight, C, config.vocab,
                                     {false, config.init, ParamInit::Constant(0), 1,
                                      config.Padding()},
                                     tp, registry);
}

// Sequence-parallel: the norm's tensors hold this rank's rows; the logits all N.
template <typename T>
std::vector<SavedTensorSpec> LmHead<T>::SavedTensors(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), n = MaxLocalRows(tp_, N), C = config_.d_model;
  const ModuleType norm = NormModule();
  std::vector<SavedTensorSpec> saved(kNumSaved);
  saved[kLnf] = {n * C, false, false, norm};
  saved[kLnfMean] = {norm_.has_mean() ? n : 0, true, false, norm};
  saved[kLnfRstd] = {n, true, false, norm};
  saved[kProbs] = {N * vocab_, true};
  return saved;
}

// Backward: dlogits [N, V'] | the norm output's gradient [N, C] | the norm's
// [threads, 2C] | sequence-parallel: the norm's gathered output [N, C] and
// its parameter gradients [2C]. Forward: the gathered norm output [N, C]
// (sequence-parallel), then (vocab-parallel) the cross-entropy's [tp + 2, N].
template <typename T>
typename LmHead<T>::Scratch LmHead<T>::Carve(ScratchCursor<T> &c, int64_t N, int threads) const {
  const bool sp = tp_.splits_rows();
  Scratch s;
  s.dlogits = c.Take(N * vocab_);
  s.d_lnf = c.Take(N * config_.d_model);
  s.ln = c.Take(norm_.ScratchSize(threads));
  s.gathered = c.Take(sp ? N * config_.d_model : 0);
  s.norm_grads = c.Take(sp ? norm_.grad_size() : 0);
  return s;
}

template <typename T>
typename LmHead<T>::Scratch LmHead<T>::ScratchOf(const Pass<T> &pass) const {
  ScratchCursor<T> cursor(pass.mb.scratch);
  const Scratch s = Carve(cursor, pass.mb.rows(), pass.mb.max_threads);
  if (tp_.splits_rows()) pass.k().Zero(norm_.grad_size(), s.norm_grads);
  return s;
}

// Sequence parallelism: the norm's gradients from this rank's rows summed
// over the group (#1446) and added to the store's.
template <typename T>
void LmHead<T>::SumNormGrads(const Pass<T> &pass, T *grads) {
  if (!tp_.splits_rows()) return;
  if (Check(TpWait(tp_, TpAllReduce(tp_, grads, norm_.grad_size()),
                   "final norm gradients (all-reduce)")))
    norm_.AddGrads(pass, grads);
}

template <typename T>
int64_t LmHead<T>::ScratchSize(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows();
  ScratchCursor<T> backward;
  Carve(backward, N, limits.max_threads);
  const int64_t forward =
      std::max(tp_.splits_rows() ? N * config_.d_model : 0, (tp_.size + 2) * N);
  return std::max(backward.used(), forward);
}

// Generation's logits of each sequence's last token only: the norm and the
// output GEMM run on those B rows.
template <typename T>
void LmHead<T>::LastLogits(const T *in, LayerActivations<T> &a, const MicroBatch<T> &mb) {
  const Pass<T> pass{mb, *this->store_};
  const Kernels<T> &k = pass.k();
  const int64_t C = config_.d_model;
  T *last = mb.scratch;  // [B, C]
  k.CopyRows(in + (mb.seq - 1) * C, mb.seq * C, mb.B, C, last, C);
  norm_.Forward(pass, last, mb.B, NormSavedOf(a));
  output_.Forward(pass, Operand<T>::Of(a[kLnf]), a[kProbs], mb.B, mb.ComputeOf(OutputModule()));
  k.CopyRows(a[kProbs], vocab_, mb.B, config_.vocab, mb.logits, config_.vocab);
  a.loss = 0;
  a.counted = 0;
}

template <typename T>
void LmHead<T>::Forward(const T *in, LayerActivations<T> &a, const MicroBatch<T> &mb) {
  if (mb.logits && tp_.size > 1)
    return this->Fail(NotSupported(
        "logits with tensor parallelism (each rank holds a slice of the vocabulary): generate "
        "and evaluate logits from a single-rank model (a checkpoint of any layout loads into one)"));
  if (mb.logits && mb.last_logits_only) return LastLogits(in, a, mb);
  const Pass<T> pass{mb, *this->store_};
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = config_.d_model;
  norm_.Forward(pass, in, n, NormSavedOf(a));
  Operand<T> x;
  if (!Check(GatherRegionInput(pass, tp_, Operand<T>::Of(a[kLnf]), N, C, mb.scratch, &x,
                               "LM head input")))
    return;
  output_.Forward(pass, x, a[kProbs], N, mb.ComputeOf(OutputModule()));
  // A padded vocabulary's logits: -inf, so that the softmax gives them 0.
  const bool padded = valid_ < vocab_;
  if (mb.logits) {
    pass.k().CopyRows(a[kProbs], vocab_, N, config_.vocab, mb.logits, config_.vocab);
    if (!mb.targets) {
      a.loss = 0;
      a.counted = 0;
      return;
    }
  }
  if (padded)
    pass.k().FillColumns(a[kProbs], N, vocab_, valid_, -std::numeric_limits<T>::infinity());
  if (mb.loss_sum) {  // added to the step's sum on the device: nothing to read back
    a.loss = std::numeric_limits<double>::quiet_NaN();
    a.counted = mb.counted;
  }
  if (tp_.size == 1 && mb.loss_sum)
    pass.k().SoftmaxCrossEntropyForwardInto(a[kProbs], mb.targets, N, vocab_, mb.loss_sum);
  else if (tp_.size == 1)
    a.loss = pass.k().SoftmaxCrossEntropyForward(a[kProbs], mb.targets, N, vocab_, &a.counted);
  else if (!Check(VocabParallelCrossEntropy(pass.k(), tp_, a[kProbs], mb.targets, N, vocab_, first_,
                                            mb.scratch, &a.loss, &a.counted, mb.loss_sum)))
    return;
  // Exactly 0 (the exponential's floor leaves ~1e-38): no gradient reaches the padding.
  if (padded) pass.k().FillColumns(a[kProbs], N, vocab_, valid_, T(0));
}

template <typename T>
void LmHead<T>::LogitsGradient(const LayerActivations<T> &a, const MicroBatch<T> &mb,
                               T *dlogits) const {
  mb.kernels->SoftmaxCrossEntropyBackward(a[kProbs], mb.targets, mb.rows(), vocab_, a.counted,
                                          mb.grad_scale, dlogits, first_);
}

template <typename T>
void LmHead<T>::Backward(const T *in, const LayerActivations<T> &a, T *, T *din,
                         const MicroBatch<T> &mb) {
  const Pass<T> pass{mb, *this->store_};
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = config_.d_model;
  const Scratch s = ScratchOf(pass);
  LogitsGradient(a, mb, s.dlogits);
  T *d_rows = nullptr;
  if (!Check(ColumnParallelBackward(pass, tp_, Parts(s.dlogits), Input(a, s.gathered), s.d_lnf,
                                    static_cast<T *>(nullptr), true, mb.ComputeOf(OutputModule()), &d_rows,
                                    "LM head input gradient")))
    return;
  pass.k().Zero(n * C, din);
  norm_.Backward(pass, d_rows, in, NormSavedOf(a), n, din, true, s.norm_grads, s.ln);
  SumNormGrads(pass, s.norm_grads);
}

template <typename T>
std::vector<SavedTensorSpec> LmHead<T>::DeferredTensors(const ActivationLimits &limits) const {
  return {{MaxLocalRows(tp_, limits.max_rows()) * config_.d_model}};
}

template <typename T>
void LmHead<T>::BackwardInput(const T *in, const LayerActivations<T> &a, T *, T *din,
                              LayerActivations<T> &d, const MicroBatch<T> &mb) {
  const Pass<T> pass{mb, *this->store_};
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = config_.d_model;
  const Scratch s = ScratchOf(pass);
  const bool sp = tp_.splits_rows();
  LogitsGradient(a, mb, s.dlogits);
  T *d_rows = nullptr;
  if (!Check(ColumnParallelBackward(pass, tp_, Parts(s.dlogits), Input(a, s.gathered),
                                    sp ? s.d_lnf : d[0], static_cast<T *>(nullptr), false,
                                    mb.ComputeOf(OutputModule()), &d_rows,
                                    "LM head input gradient")))
    return;
  if (sp) pass.k().Copy(d_rows, n * C, d[0]);
  pass.k().Zero(n * C, din);
  norm_.Backward(pass, d[0], in, NormSavedOf(a), n, din, false, nullptr, s.ln);
}

// The logits' gradient again (an element-wise pass over the probabilities,
// far cheaper than keeping [N, V'] per micro-batch), then the weights'.
template <typename T>
void LmHead<T>::BackwardWeight(const T *in, const LayerActivations<T> &a,
                               const LayerActivations<T> &d, const MicroBatch<T> &mb) {
  const Pass<T> pass{mb, *this->store_};
  const int64_t n = LocalRows(tp_, mb.rows());
  const Scratch s = ScratchOf(pass);
  LogitsGradient(a, mb, s.dlogits);
  if (!Check(ColumnParallelWeightBackward(pass, tp_, Parts(s.dlogits), Input(a, s.gathered),
                                          mb.ComputeOf(OutputModule()), "LM head input")))
    return;
  norm_.WeightBackward(pass, d[0], in, NormSavedOf(a), n, s.norm_grads, s.ln);
  SumNormGrads(pass, s.norm_grads);
}

template <typename T>
double LmHead<T>::ForwardFlops(int64_t B, int64_t seq) const {
  return 2.0 * double(B * seq) * double(config_.d_model) * double(vocab_);
}

template class LmHead<float>;
template class LmHead<double>;

}  // namespace dst
