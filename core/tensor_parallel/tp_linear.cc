#include "core/tensor_parallel/tp_linear.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/kernels/cpu/linear.h"
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

template <typename T>
std::vector<SavedTensorSpec> TensorParallelLinear<T>::SavedTensors(
    const ActivationLimits &limits) const {
  return {{limits.max_rows() * OutWidth()}};
}

template <typename T>
int64_t TensorParallelLinear<T>::ScratchSize(const ActivationLimits &limits) const {
  return role_ == TpRole::kColumnGathered ? limits.max_rows() * (out_ + out_local_) : 0;
}

template <typename T>
bool TensorParallelLinear<T>::Finish(std::unique_ptr<Work> work) {
  Status st = TpWait(std::move(work),
                     role_ == TpRole::kRow ? "row-parallel linear" : "column-parallel linear");
  if (st.ok()) return true;
  this->Fail(std::move(st));
  return false;
}

template <typename T>
void TensorParallelLinear<T>::Forward(const T *in, LayerActivations<T> &act,
                                      const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  const int64_t rows = mb.rows();
  const T *bias = b_ >= 0 ? p.param(b_) : nullptr;
  if (role_ == TpRole::kColumn) {
    cpu::LinearForward(in, p.param(w_), bias, rows, in_, out_local_, act[0]);
    return;
  }
  if (role_ == TpRole::kColumnGathered) {
    // [tp][rows][out / tp] gathered, then interleaved into [rows][out].
    T *gathered = mb.scratch;
    const int64_t shard = rows * out_local_;
    cpu::LinearForward(in, p.param(w_), bias, rows, in_, out_local_, gathered + tp_.rank * shard);
    if (!Finish(TpAllGather(tp_, gathered, shard))) return;
    for (int64_t part = 0; part < tp_.size; ++part)
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(act[0] + r * out_ + part * out_local_, gathered + part * shard + r * out_local_,
                    size_t(out_local_) * sizeof(T));
    return;
  }
  // Row: partial sums over this rank's input features, summed, then the bias once.
  cpu::LinearForward<T>(in, p.param(w_), nullptr, rows, in_local_, out_, act[0]);
  if (!Finish(TpAllReduce(tp_, act[0], rows * out_))) return;
  if (bias) cpu::AddBiasToRows(bias, rows, out_, act[0]);
}

template <typename T>
const T *TensorParallelLinear<T>::LocalGradient(const T *dout, const MicroBatch<T> &mb) const {
  if (role_ != TpRole::kColumnGathered) return dout;
  T *local = mb.scratch + mb.rows() * out_;  // after the gather buffer
  for (int64_t r = 0; r < mb.rows(); ++r)
    std::memcpy(local + r * out_local_, dout + r * out_ + tp_.rank * out_local_,
                size_t(out_local_) * sizeof(T));
  return local;
}

template <typename T>
void TensorParallelLinear<T>::WeightGradient(const T *dy_local, const T *in,
                                             const MicroBatch<T> &mb) {
  ParamStore<T> &p = *this->store_;
  cpu::LinearWeightBackward(dy_local, in, mb.rows(), in_local_, out_local_, p.grad(w_),
                            b_ >= 0 ? p.grad(b_) : nullptr);
}

template <typename T>
void TensorParallelLinear<T>::InputGradient(const T *dy_local, const T *in, T *din,
                                            const MicroBatch<T> &mb, bool weights) {
  const int64_t rows = mb.rows();
  if (din)
    cpu::LinearBackward<T>(dy_local, nullptr, this->store_->param(w_), rows, in_local_, out_local_,
                           din, nullptr, nullptr);
  // Column-parallel: every rank holds part of each input gradient (the
  // first layer has none to send). The sum runs while the weights' GEMM does.
  std::unique_ptr<Work> sum;
  if (din && role_ != TpRole::kRow) sum = TpAllReduce(tp_, din, rows * in_);
  if (weights) WeightGradient(dy_local, in, mb);
  if (sum) Finish(std::move(sum));
}

template <typename T>
void TensorParallelLinear<T>::Backward(const T *in, const LayerActivations<T> &, T *dout, T *din,
                                       const MicroBatch<T> &mb) {
  InputGradient(LocalGradient(dout, mb), in, din, mb, /*weights=*/true);
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
  const T *dy_local = LocalGradient(dout, mb);
  std::memcpy(deferred[0], dy_local, size_t(mb.rows() * out_local_) * sizeof(T));
  InputGradient(dy_local, in, din, mb, /*weights=*/false);
}

template <typename T>
void TensorParallelLinear<T>::BackwardWeight(const T *in, const LayerActivations<T> &,
                                             const LayerActivations<T> &deferred,
                                             const MicroBatch<T> &mb) {
  WeightGradient(deferred[0], in, mb);
}

template class TensorParallelLinear<float>;
template class TensorParallelLinear<double>;

}  // namespace dst
