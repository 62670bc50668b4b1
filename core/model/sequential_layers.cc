#include "core/model/sequential_layers.h"

#include <cmath>

#include "core/tensor_parallel/sequence_parallel.h"

namespace dst {

// ---------------------------------------------------------------- linear

template <typename T>
LinearLayer<T>::LinearLayer(const std::string &prefix, int64_t in, int64_t out, bool bias,
                            ParamRegistry &registry)
    : in_features_(in), out_features_(out) {
  const double bound = 1.0 / std::sqrt(double(in));
  w_ = registry.Add(prefix + ".weight", {out, in}, ParamInit::Uniform(bound));
  if (bias) b_ = registry.Add(prefix + ".bias", {out}, ParamInit::Uniform(bound));
}

// Saves its output [B, out].
template <typename T>
std::vector<SavedTensorSpec> LinearLayer<T>::SavedTensors(const ActivationLimits &limits) const {
  return {{limits.max_rows() * out_features_}};
}

template <typename T>
void LinearLayer<T>::Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  k.LinearForward(in, this->store_->param(w_), b_ >= 0 ? this->store_->param(b_) : nullptr,
                  mb.rows(), in_features_, out_features_, act[0],
                  mb.ComputeOf(ModuleType::kLinear));
}

template <typename T>
void LinearLayer<T>::Backward(const T *in, const LayerActivations<T> &, T *dout, T *din,
                              const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  k.LinearBackward(dout, in, this->store_->param(w_), mb.rows(), in_features_, out_features_, din,
                   this->store_->grad(w_), b_ >= 0 ? this->store_->grad(b_) : nullptr,
                   mb.ComputeOf(ModuleType::kLinear));
}

template <typename T>
std::vector<SavedTensorSpec> LinearLayer<T>::DeferredTensors(const ActivationLimits &limits) const {
  return {{limits.max_rows() * out_features_}};
}

template <typename T>
void LinearLayer<T>::BackwardInput(const T *, const LayerActivations<T> &, T *dout, T *din,
                                   LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  k.Copy(dout, mb.rows() * out_features_, deferred[0]);
  if (din)
    k.LinearBackward(dout, nullptr, this->store_->param(w_), mb.rows(), in_features_, out_features_,
                     din, nullptr, nullptr, mb.ComputeOf(ModuleType::kLinear));
}

template <typename T>
void LinearLayer<T>::BackwardWeight(const T *in, const LayerActivations<T> &,
                                    const LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  k.LinearWeightBackward(deferred[0], in, mb.rows(), in_features_, out_features_,
                         this->store_->grad(w_), b_ >= 0 ? this->store_->grad(b_) : nullptr,
                         mb.ComputeOf(ModuleType::kLinear));
}

// ---------------------------------------------------------------- activations

// Saves its output [B, width].
template <typename T>
std::vector<SavedTensorSpec> ActivationLayer<T>::SavedTensors(
    const ActivationLimits &limits) const {
  return {{MaxLocalRows(rows_, limits.max_rows()) * width_}};
}

template <typename T>
void ActivationLayer<T>::Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  const int64_t n = LocalRows(rows_, mb.rows()) * width_;
  if (fn_ == Fn::kRelu)
    k.ReluForward(in, n, act[0]);
  else
    k.GeluForward(in, n, act[0]);
}

template <typename T>
void ActivationLayer<T>::Backward(const T *in, const LayerActivations<T> &, T *dout, T *din,
                                  const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  if (!din) return;
  const int64_t n = LocalRows(rows_, mb.rows()) * width_;
  if (fn_ == Fn::kRelu)
    k.ReluBackward(dout, in, n, din);
  else
    k.GeluBackward(dout, in, n, din);
}

// ---------------------------------------------------------------- layernorm

template <typename T>
LayerNormLayer<T>::LayerNormLayer(const std::string &prefix, int64_t width, ParamRegistry &registry,
                                  const TensorParallelGroup &rows)
    : width_(width), rows_(rows) {
  w_ = registry.Add(prefix + ".weight", {width}, ParamInit::Constant(1));
  b_ = registry.Add(prefix + ".bias", {width}, ParamInit::Constant(0));
}

// Saves its output [B, width], and the mean and 1/std [B] of each row (exact).
template <typename T>
std::vector<SavedTensorSpec> LayerNormLayer<T>::SavedTensors(const ActivationLimits &limits) const {
  const int64_t n = MaxLocalRows(rows_, limits.max_rows());
  return {{n * width_}, {n, true}, {n, true}};
}

template <typename T>
void LayerNormLayer<T>::Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  k.LayerNormForward(in, this->store_->param(w_), this->store_->param(b_),
                     LocalRows(rows_, mb.rows()), width_, act[0], act[1], act[2]);
}

template <typename T>
bool LayerNormLayer<T>::ParamGradients(const T *dout, const T *in, const LayerActivations<T> &act,
                                       const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  ParamStore<T> &p = *this->store_;
  const int64_t n = LocalRows(rows_, mb.rows());
  if (!rows_.splits_rows()) {
    k.LayerNormParamBackward(dout, in, act[1], act[2], n, width_, p.grad(w_), p.grad(b_),
                             mb.scratch, mb.max_threads);
    return true;
  }
  // This rank's rows' part, summed over the group, then accumulated.
  T *sums = mb.scratch + int64_t(mb.max_threads) * 2 * width_;  // [2 * width]
  k.Zero(2 * width_, sums);
  k.LayerNormParamBackward(dout, in, act[1], act[2], n, width_, sums, sums + width_, mb.scratch,
                           mb.max_threads);
  Status st = TpWait(rows_, TpAllReduce(rows_, sums, 2 * width_), "LayerNorm weight gradients");
  if (!st.ok()) {
    this->Fail(std::move(st));
    return false;
  }
  k.AddInPlace(sums, width_, p.grad(w_));
  k.AddInPlace(sums + width_, width_, p.grad(b_));
  return true;
}

template <typename T>
void LayerNormLayer<T>::Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                                 const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  if (rows_.splits_rows()) {  // this rank's rows; the parameter gradients summed over tp
    const int64_t n = LocalRows(rows_, mb.rows());
    if (din) {
      k.Zero(n * width_, din);
      k.LayerNormBackward(dout, in, this->store_->param(w_), act[1], act[2], n, width_, din,
                          nullptr, nullptr, mb.scratch, mb.max_threads);
    }
    ParamGradients(dout, in, act, mb);
    return;
  }
  // The weight/bias gradients are needed even when din is not.
  T *dx = din ? din : dout;
  if (din)
    k.Zero(mb.rows() * width_, din);
  else {
    // First layer: nobody consumes the input gradient, but the kernel computes
    // it alongside the parameter gradients; send it to the scratch tail.
    dx = mb.scratch + int64_t(mb.max_threads) * 2 * width_;
    k.Zero(mb.rows() * width_, dx);
  }
  k.LayerNormBackward(dout, in, this->store_->param(w_), act[1], act[2], mb.rows(), width_, dx,
                      this->store_->grad(w_), this->store_->grad(b_), mb.scratch, mb.max_threads);
}

template <typename T>
std::vector<SavedTensorSpec> LayerNormLayer<T>::DeferredTensors(
    const ActivationLimits &limits) const {
  return {{MaxLocalRows(rows_, limits.max_rows()) * width_}};
}

template <typename T>
void LayerNormLayer<T>::BackwardInput(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                                      LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  const int64_t n = LocalRows(rows_, mb.rows());
  k.Copy(dout, n * width_, deferred[0]);
  if (!din) return;
  k.Zero(n * width_, din);
  k.LayerNormBackward(dout, in, this->store_->param(w_), act[1], act[2], n, width_, din, nullptr,
                      nullptr, mb.scratch, mb.max_threads);
}

template <typename T>
void LayerNormLayer<T>::BackwardWeight(const T *in, const LayerActivations<T> &act,
                                       const LayerActivations<T> &deferred,
                                       const MicroBatch<T> &mb) {
  ParamGradients(deferred[0], in, act, mb);
}

// ---------------------------------------------------------------- losses

// Sequence-parallel: this rank's rows against their labels; the loss is the
// mean of the ranks' means (equal row counts), the gradient's mean is over
// every rank's elements.
template <typename T>
void MseLossLayer<T>::Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  const int64_t n = LocalRows(rows_, mb.rows());
  const T *labels = RowsOf(rows_, mb.labels, n, width_);
  if (!rows_.splits_rows()) {
    act.loss = k.MseForward(in, labels, n * width_);
    return;
  }
  T mean = T(k.MseForward(in, labels, n * width_));  // the loss is a host scalar
  Status st = TpWait(rows_, TpAllReduce(rows_, &mean, 1), "MSE loss");
  if (!st.ok()) return this->Fail(std::move(st));
  act.loss = double(mean) / double(rows_.size);
}

template <typename T>
void MseLossLayer<T>::Backward(const T *in, const LayerActivations<T> &, T *, T *din,
                               const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  const int64_t n = LocalRows(rows_, mb.rows());
  if (din)
    k.MseBackward(in, RowsOf(rows_, mb.labels, n, width_), n * width_, mb.grad_scale, din,
                  mb.rows() * width_);
}

// Saves the softmax probabilities [B, classes] (exact).
template <typename T>
std::vector<SavedTensorSpec> CrossEntropyLossLayer<T>::SavedTensors(
    const ActivationLimits &limits) const {
  return {{MaxLocalRows(rows_, limits.max_rows()) * classes_, true}};
}

// Sequence-parallel: this rank's rows; the loss is the sum of the ranks'
// losses over the sum of their counted targets, which the gradient divides by.
template <typename T>
void CrossEntropyLossLayer<T>::Forward(const T *in, LayerActivations<T> &act,
                                       const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  const int64_t n = LocalRows(rows_, mb.rows());
  k.Copy(in, n * classes_, act[0]);
  const T mean = T(k.SoftmaxCrossEntropyForward(act[0], RowsOf(rows_, mb.targets, n, int64_t(1)), n,
                                                classes_, &act.counted));
  act.loss = double(mean);
  if (!rows_.splits_rows()) return;
  T sums[2] = {mean * T(act.counted), T(act.counted)};  // loss sum, counted
  Status st = TpWait(rows_, TpAllReduce(rows_, sums, 2), "cross-entropy loss");
  if (!st.ok()) return this->Fail(std::move(st));
  act.counted = int64_t(sums[1]);
  act.loss = act.counted > 0 ? double(sums[0]) / double(sums[1]) : 0.0;
}

template <typename T>
void CrossEntropyLossLayer<T>::Backward(const T *, const LayerActivations<T> &act, T *, T *din,
                                        const MicroBatch<T> &mb) {
  const Kernels<T> &k = *mb.kernels;
  const int64_t n = LocalRows(rows_, mb.rows());
  if (din)
    k.SoftmaxCrossEntropyBackward(act[0], RowsOf(rows_, mb.targets, n, int64_t(1)), n, classes_,
                                  act.counted, mb.grad_scale, din, 0);
}

template class LinearLayer<float>;
template class LinearLayer<double>;
template class ActivationLayer<float>;
template class ActivationLayer<double>;
template class LayerNormLayer<float>;
template class LayerNormLayer<double>;
template class MseLossLayer<float>;
template class MseLossLayer<double>;
template class CrossEntropyLossLayer<float>;
template class CrossEntropyLossLayer<double>;

}  // namespace dst
