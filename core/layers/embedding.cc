#include "core/layers/embedding.h"

#include "core/tensor_parallel/sequence_parallel.h"
#include "core/tensor_parallel/tp_comm.h"

namespace dst {

template <typename T>
TokenEmbedding<T>::TokenEmbedding(const EmbeddingConfig &config, const EmbeddingNames &names,
                                  ParamRegistry &registry, const TensorParallelGroup &tp)
    : config_(config),
      kind_(names.kind),
      tp_(tp),
      first_(tp.rank * (config.Held() / tp.size)),
      rows_(config.Held() / tp.size) {
  wte_ = registry.Add(names.wte, {config.vocab, config.d_model}, config.init,
                      TensorSplit{0, tp.size, tp.rank, 1, config.Padding()});
  if (config.positions)
    wpe_ = registry.Add(names.wpe, {config.n_ctx, config.d_model}, config.init);
  if (config.norm)
    norm_ = Norm<T>(NormKind::kLayerNorm, names.norm, config.d_model, config.norm_eps, registry);
}

template <typename T>
std::vector<SavedTensorSpec> TokenEmbedding<T>::SavedTensors(const ActivationLimits &limits) const {
  const int64_t n = MaxLocalRows(tp_, limits.max_rows()), C = config_.d_model;
  const int64_t normed = config_.norm ? n : 0;
  std::vector<SavedTensorSpec> saved(kNumSaved);
  saved[kOut] = {n * C};
  saved[kLookup] = {normed * C, false, false, ModuleType::kEmbedding};
  saved[kMean] = {normed, true, false, ModuleType::kLayerNorm};
  saved[kRstd] = {normed, true, false, ModuleType::kLayerNorm};
  return saved;
}

// Sequence-parallel: every row's lookups [N, C], reduce-scattered to this
// rank's rows (forward), or the output gradient's rows gathered (backward).
// With the norm (backward): the lookup's gradient [n, C], the norm's
// [threads, 2C] and its parameter gradients [2C].
template <typename T>
int64_t TokenEmbedding<T>::ScratchSize(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows(), C = config_.d_model, n = MaxLocalRows(tp_, N);
  const int64_t whole = tp_.splits_rows() ? N * C : 0;
  const int64_t norm = config_.norm ? n * C + norm_.ScratchSize(limits.max_threads) + 2 * C : 0;
  return whole + norm;
}

// wpe's rows from the micro-batch's first position on (generation's are past 0).
template <typename T>
const T *TokenEmbedding<T>::Positions(const Pass<T> &pass) const {
  return pass.p.param(wpe_) + pass.mb.position * config_.d_model;
}

template <typename T>
bool TokenEmbedding<T>::Lookup(const Pass<T> &pass, T *out) {
  const Kernels<T> &k = pass.k();
  ParamStore<T> &p = pass.p;
  const MicroBatch<T> &mb = pass.mb;
  const int64_t C = config_.d_model;
  if (tp_.size == 1) {
    if (config_.positions)
      k.EmbeddingForward(mb.tokens, p.param(wte_), Positions(pass), mb.B, mb.seq, C, out);
    else
      k.EmbeddingLookupRange(mb.tokens, p.param(wte_), 0, rows_, mb.B, mb.seq, C, out);
    return true;
  }
  if (!tp_.splits_rows()) {
    k.EmbeddingLookupRange(mb.tokens, p.param(wte_), first_, rows_, mb.B, mb.seq, C, out);
    Status st = TpWait(tp_, TpAllReduce(tp_, out, mb.rows() * C), "token embedding");
    if (!st.ok()) return this->Fail(std::move(st)), false;
    if (config_.positions) k.AddPositionsToRows(Positions(pass), 0, mb.rows(), mb.seq, C, out);
    return true;
  }
  const int64_t n = LocalRows(tp_, mb.rows());
  T *whole = mb.scratch;  // [N, C]
  k.EmbeddingLookupRange(mb.tokens, p.param(wte_), first_, rows_, mb.B, mb.seq, C, whole);
  Status st = TpWait(tp_, ReduceScatterRows(tp_, whole, n, C), "token embedding");
  if (!st.ok()) return this->Fail(std::move(st)), false;
  k.Copy(RowsOf(tp_, whole, n, C), n * C, out);
  if (config_.positions) k.AddPositionsToRows(Positions(pass), tp_.rank * n, n, mb.seq, C, out);
  return true;
}

template <typename T>
void TokenEmbedding<T>::Forward(const T *, LayerActivations<T> &a, const MicroBatch<T> &mb) {
  const Pass<T> pass{mb, *this->store_};
  if (!Lookup(pass, config_.norm ? a[kLookup] : a[kOut])) return;
  if (config_.norm)
    norm_.Forward(pass, a[kLookup], LocalRows(tp_, mb.rows()),
                  {Operand<T>::Of(a[kOut]), a[kMean], a[kRstd]});
}

template <typename T>
void TokenEmbedding<T>::Backward(const T *, const LayerActivations<T> &a, T *dout, T *,
                                 const MicroBatch<T> &mb) {
  const Pass<T> pass{mb, *this->store_};
  const Kernels<T> &k = pass.k();
  ParamStore<T> &p = pass.p;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N), C = config_.d_model;
  T *whole = mb.scratch;                               // [N, C] sequence-parallel
  T *d_lookup = whole + (tp_.splits_rows() ? N * C : 0);  // [n, C]
  T *ln_scratch = d_lookup + n * C;                    // [threads, 2C]
  T *ln_grads = ln_scratch + norm_.ScratchSize(mb.max_threads);  // [2C]
  const T *grad = dout;
  if (config_.norm) {  // through the norm to the lookup
    const bool sp = tp_.splits_rows();
    if (sp) k.Zero(2 * C, ln_grads);
    k.Zero(n * C, d_lookup);
    norm_.Backward(pass, dout, a[kLookup], {Operand<T>::Of(a[kOut]), a[kMean], a[kRstd]}, n,
                   d_lookup, true, sp ? ln_grads : nullptr, ln_scratch);
    if (sp) {
      Status st = TpWait(tp_, TpAllReduce(tp_, ln_grads, 2 * C), "embedding norm gradients");
      if (!st.ok()) return this->Fail(std::move(st));
      norm_.AddGrads(pass, ln_grads);
    }
    grad = d_lookup;
  }
  if (tp_.splits_rows()) {  // every row's gradient: wpe's is then whole on every rank
    Status st = TpWait(tp_, GatherRows(k, tp_, grad, n, C, whole), "embedding gradient");
    if (!st.ok()) return this->Fail(std::move(st));
    grad = whole;
  }
  k.EmbeddingBackward(grad, mb.tokens, mb.B, mb.seq, C, p.grad(wte_),
                      wpe_ >= 0 ? p.grad(wpe_) : nullptr, first_, rows_);
}

template <typename T>
std::vector<SavedTensorSpec> TokenEmbedding<T>::DeferredTensors(
    const ActivationLimits &limits) const {
  return {{MaxLocalRows(tp_, limits.max_rows()) * config_.d_model}};
}

template <typename T>
void TokenEmbedding<T>::BackwardInput(const T *, const LayerActivations<T> &, T *dout, T *,
                                      LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
  mb.kernels->Copy(dout, LocalRows(tp_, mb.rows()) * config_.d_model, deferred[0]);
}

template <typename T>
void TokenEmbedding<T>::BackwardWeight(const T *in, const LayerActivations<T> &act,
                                       const LayerActivations<T> &deferred,
                                       const MicroBatch<T> &mb) {
  Backward(in, act, deferred[0], nullptr, mb);
}

template class TokenEmbedding<float>;
template class TokenEmbedding<double>;

}  // namespace dst
