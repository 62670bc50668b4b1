#include "core/layers/tp_linear.h"

#include <cmath>
#include <type_traits>

#include "core/tensor_parallel/sequence_parallel.h"
#include "core/tensor_parallel/tp_comm.h"

namespace dst {

template <typename T>
TensorParallelLinear<T>::TensorParallelLinear(const std::string &prefix, int64_t in, int64_t out,
                                              bool bias, TpRole role, const TensorParallelGroup &tp,
                                              ParamRegistry &registry)
    : role_(role), tp_(tp), in_(in), out_(out), in_local_(in), out_local_(out), bias_(bias) {
  const bool row = role == TpRole::kRow;
  (row ? in_local_ : out_local_) /= tp.size;
  // PyTorch's default over the global fan-in: the same values at any tp.
  const ParamInit init = ParamInit::Uniform(1.0 / std::sqrt(double(in)));
  w_ =
      registry.Add(prefix + ".weight", {out, in}, init, TensorSplit{row ? 1 : 0, tp.size, tp.rank});
  if (bias)
    b_ = registry.Add(prefix + ".bias", {out}, init,
                      row ? TensorSplit{} : TensorSplit{0, tp.size, tp.rank});
}

// Column: [rows, out / tp] inside the tensor-parallel region (all N rows);
// row and gathered: [rows, out], this rank's n rows under sequence parallelism.
template <typename T>
std::vector<SavedTensorSpec> TensorParallelLinear<T>::SavedTensors(
    const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows();
  return {{(role_ == TpRole::kColumn ? N : MaxLocalRows(tp_, N)) * OutWidth()}};
}

// Gathered: the all-gather's buffer [rows, out] and this rank's output
// columns [rows, out / tp]. Sequence-parallel (N rows): the gathered input
// [N, in] | a GEMM's output before its reduce-scatter or all-gather [N, out] |
// the gathered output gradient [N, out] | its columns [N, out / tp] | the
// input gradient's partial sums [N, in].
template <typename T>
int64_t TensorParallelLinear<T>::ScratchSize(const ActivationLimits &limits) const {
  const int64_t N = limits.max_rows();
  if (tp_.splits_rows()) return N * (2 * in_ + 2 * out_ + out_local_);
  return role_ == TpRole::kColumnGathered ? N * (out_ + out_local_) : 0;
}

template <typename T>
bool TensorParallelLinear<T>::Finish(std::unique_ptr<Work> work) {
  Status st = TpWait(tp_, std::move(work),
                     role_ == TpRole::kRow ? "row-parallel linear" : "column-parallel linear");
  if (st.ok()) return true;
  this->Fail(std::move(st));
  return false;
}

template <typename T>
typename TensorParallelLinear<T>::Scratch TensorParallelLinear<T>::ScratchOf(
    const MicroBatch<T> &mb) const {
  const int64_t N = mb.rows();
  Scratch s;
  if (!tp_.splits_rows()) {
    s.output = mb.scratch;              // [N, out]
    s.columns = mb.scratch + N * out_;  // [N, out / tp]
    return s;
  }
  s.input = mb.scratch;                    // [N, in]
  s.output = s.input + N * in_;            // [N, out]
  s.gradient = s.output + N * out_;        // [N, out]
  s.columns = s.gradient + N * out_;       // [N, out / tp]
  s.partial = s.columns + N * out_local_;  // [N, in]
  return s;
}

template <typename T>
const T *TensorParallelLinear<T>::WholeInput(const T *in, const MicroBatch<T> &mb) {
  if (!tp_.splits_rows() || role_ == TpRole::kRow) return in;  // a row-parallel input: all rows
  const int64_t n = LocalRows(tp_, mb.rows());
  T *whole = ScratchOf(mb).input;
  return Finish(GatherRows(*mb.kernels, tp_, in, n, in_, whole)) ? whole : nullptr;
}

template <typename T>
void TensorParallelLinear<T>::Forward(const T *in, LayerActivations<T> &act,
                                      const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N);
  const T *bias = b_ >= 0 ? p.param(b_) : nullptr;
  const Scratch s = ScratchOf(mb);
  in = WholeInput(in, mb);  // sequence-parallel: every rank's rows
  if (!in) return;
  if (role_ == TpRole::kColumn) {
    k.LinearForward(in, p.param(w_), bias, N, in_, out_local_, act[0], mb.compute);
    return;
  }
  if (role_ == TpRole::kColumnGathered) {
    // [tp][N][out / tp] gathered, then interleaved into [rows][out] (this
    // rank's rows under sequence parallelism).
    T *gathered = s.output;
    const int64_t shard = N * out_local_;
    k.LinearForward(in, p.param(w_), bias, N, in_, out_local_, gathered + tp_.rank * shard,
                    mb.compute);
    if (!Finish(TpAllGather(tp_, gathered, shard))) return;
    const int64_t first = tp_.splits_rows() ? tp_.rank * n : 0;
    for (int64_t part = 0; part < tp_.size; ++part)
      k.CopyRows(gathered + part * shard + first * out_local_, out_local_, n, out_local_,
                 act[0] + part * out_local_, out_);
    return;
  }
  // Row: partial sums over this rank's input features, summed (sequence-
  // parallel: reduce-scattered to this rank's rows), then the bias once.
  if (!tp_.splits_rows()) {
    k.LinearForward(in, p.param(w_), nullptr, N, in_local_, out_, act[0], mb.compute);
    if (!Finish(TpAllReduce(tp_, act[0], N * out_))) return;
  } else {
    k.LinearForward(in, p.param(w_), nullptr, N, in_local_, out_, s.output, mb.compute);
    if (!Finish(ReduceScatterRows(tp_, s.output, n, out_))) return;
    k.Copy(RowsOf(tp_, s.output, n, out_), n * out_, act[0]);
  }
  if (bias) k.AddBiasToRows(bias, n, out_, act[0]);
}

// The output gradient this rank's weights see, [N, out / tp]: dout itself
// (column), its columns (gathered), and under sequence parallelism the rows
// of every rank gathered first (row, gathered). Null on failure.
template <typename T>
const T *TensorParallelLinear<T>::LocalGradient(const T *dout, const MicroBatch<T> &mb) {
  if (role_ == TpRole::kColumn) return dout;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N);
  const Scratch s = ScratchOf(mb);
  if (tp_.splits_rows()) {
    if (!Finish(GatherRows(*mb.kernels, tp_, dout, n, out_, s.gradient))) return nullptr;
    dout = s.gradient;
  }
  if (role_ == TpRole::kRow) return dout;
  mb.kernels->CopyRows(dout + tp_.rank * out_local_, out_, N, out_local_, s.columns, out_local_);
  return s.columns;
}

template <typename T>
void TensorParallelLinear<T>::WeightGradient(const T *dy_local, const T *in,
                                             const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  k.LinearWeightBackward(dy_local, in, mb.rows(), in_local_, out_local_, p.grad(w_),
                         b_ >= 0 ? p.grad(b_) : nullptr, mb.compute);
}

// dx = dy_local W_local. Column-parallel: every rank holds part of each input
// gradient (the first layer has none to send): all-reduced, or under sequence
// parallelism reduce-scattered to this rank's rows; the sum runs while the
// weights' GEMM (if `weights`) does, on the input gathered again.
template <typename T>
void TensorParallelLinear<T>::InputGradient(const T *dy_local, const T *in, T *din,
                                            const MicroBatch<T> &mb, bool weights) {
  const Kernels<T> &k = *mb.kernels;
  const int64_t N = mb.rows(), n = LocalRows(tp_, N);
  const bool scatter = din && role_ != TpRole::kRow && tp_.splits_rows();
  T *dx = scatter ? ScratchOf(mb).partial : din;
  if (dx)
    k.LinearBackward(dy_local, nullptr, this->store_->param(w_), N, in_local_, out_local_, dx,
                     nullptr, nullptr, mb.compute);
  std::unique_ptr<Work> sum;
  if (scatter)
    sum = ReduceScatterRows(tp_, dx, n, in_);
  else if (din && role_ != TpRole::kRow)
    sum = TpAllReduce(tp_, din, N * in_);
  if (weights) {
    const T *x = WholeInput(in, mb);
    if (x) WeightGradient(dy_local, x, mb);
  }
  if (sum && Finish(std::move(sum)) && scatter) k.Copy(RowsOf(tp_, dx, n, in_), n * in_, din);
}

template <typename T>
void TensorParallelLinear<T>::Backward(const T *in, const LayerActivations<T> &, T *dout, T *din,
                                       const MicroBatch<T> &mb) {
  const T *dy_local = LocalGradient(dout, mb);
  if (dy_local) InputGradient(dy_local, in, din, mb, /*weights=*/true);
}

template <typename T>
std::vector<SavedTensorSpec> TensorParallelLinear<T>::DeferredTensors(
    const ActivationLimits &limits) const {
  return {{limits.max_rows() * out_local_}};
}

template <typename T>
void TensorParallelLinear<T>::BackwardInput(const T *in, const LayerActivations<T> &, T *dout,
                                            T *din, LayerActivations<T> &deferred,
                                            const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  const T *dy_local = LocalGradient(dout, mb);
  if (!dy_local) return;
  k.Copy(dy_local, mb.rows() * out_local_, deferred[0]);
  InputGradient(dy_local, in, din, mb, /*weights=*/false);
}

template <typename T>
void TensorParallelLinear<T>::BackwardWeight(const T *in, const LayerActivations<T> &,
                                             const LayerActivations<T> &deferred,
                                             const MicroBatch<T> &mb) {
  const T *x = WholeInput(in, mb);  // sequence-parallel: gathered again
  if (x) WeightGradient(deferred[0], x, mb);
}

template class TensorParallelLinear<float>;
template class TensorParallelLinear<double>;

}  // namespace dst
