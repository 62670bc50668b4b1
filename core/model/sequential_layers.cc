#include "core/model/sequential_layers.h"

#include <cmath>
#include <cstring>

#include "core/kernels/cpu/activations.h"
#include "core/kernels/cpu/layernorm.h"
#include "core/kernels/cpu/linear.h"
#include "core/kernels/cpu/loss.h"

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
  cpu::LinearForward(in, this->store_->param(w_), b_ >= 0 ? this->store_->param(b_) : nullptr,
                     mb.rows(), in_features_, out_features_, act[0]);
}

template <typename T>
void LinearLayer<T>::Backward(const T *in, const LayerActivations<T> &, T *dout, T *din,
                              const MicroBatch<T> &mb) {
  cpu::LinearBackward(dout, in, this->store_->param(w_), mb.rows(), in_features_, out_features_,
                      din, this->store_->grad(w_), b_ >= 0 ? this->store_->grad(b_) : nullptr);
}

template <typename T>
std::vector<SavedTensorSpec> LinearLayer<T>::DeferredTensors(const ActivationLimits &limits) const {
  return {{limits.max_rows() * out_features_}};
}

template <typename T>
void LinearLayer<T>::BackwardInput(const T *, const LayerActivations<T> &, T *dout, T *din,
                                   LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
  std::memcpy(deferred[0], dout, size_t(mb.rows() * out_features_) * sizeof(T));
  if (din)
    cpu::LinearBackward<T>(dout, nullptr, this->store_->param(w_), mb.rows(), in_features_,
                           out_features_, din, nullptr, nullptr);
}

template <typename T>
void LinearLayer<T>::BackwardWeight(const T *in, const LayerActivations<T> &,
                                    const LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
  cpu::LinearWeightBackward(deferred[0], in, mb.rows(), in_features_, out_features_,
                            this->store_->grad(w_), b_ >= 0 ? this->store_->grad(b_) : nullptr);
}

// ---------------------------------------------------------------- activations

// Saves its output [B, width].
template <typename T>
std::vector<SavedTensorSpec> ActivationLayer<T>::SavedTensors(
    const ActivationLimits &limits) const {
  return {{limits.max_rows() * width_}};
}

template <typename T>
void ActivationLayer<T>::Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) {
  if (fn_ == Fn::kRelu)
    cpu::ReluForward(in, mb.rows() * width_, act[0]);
  else
    cpu::GeluForward(in, mb.rows() * width_, act[0]);
}

template <typename T>
void ActivationLayer<T>::Backward(const T *in, const LayerActivations<T> &, T *dout, T *din,
                                  const MicroBatch<T> &mb) {
  if (!din) return;
  if (fn_ == Fn::kRelu)
    cpu::ReluBackward(dout, in, mb.rows() * width_, din);
  else
    cpu::GeluBackward(dout, in, mb.rows() * width_, din);
}

// ---------------------------------------------------------------- layernorm

template <typename T>
LayerNormLayer<T>::LayerNormLayer(const std::string &prefix, int64_t width, ParamRegistry &registry)
    : width_(width) {
  w_ = registry.Add(prefix + ".weight", {width}, ParamInit::Constant(1));
  b_ = registry.Add(prefix + ".bias", {width}, ParamInit::Constant(0));
}

// Saves its output [B, width], and the mean and 1/std [B] of each row (exact).
template <typename T>
std::vector<SavedTensorSpec> LayerNormLayer<T>::SavedTensors(const ActivationLimits &limits) const {
  return {{limits.max_rows() * width_}, {limits.max_rows(), true}, {limits.max_rows(), true}};
}

template <typename T>
void LayerNormLayer<T>::Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) {
  cpu::LayerNormForward(in, this->store_->param(w_), this->store_->param(b_), mb.rows(), width_,
                        act[0], act[1], act[2]);
}

template <typename T>
void LayerNormLayer<T>::Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                                 const MicroBatch<T> &mb) {
  // The weight/bias gradients are needed even when din is not.
  T *dx = din ? din : dout;
  if (din)
    std::memset(din, 0, size_t(mb.rows() * width_) * sizeof(T));
  else {
    // First layer: nobody consumes the input gradient, but the kernel computes
    // it alongside the parameter gradients; send it to the scratch tail.
    dx = mb.scratch + int64_t(mb.max_threads) * 2 * width_;
    std::memset(dx, 0, size_t(mb.rows() * width_) * sizeof(T));
  }
  cpu::LayerNormBackward(dout, in, this->store_->param(w_), act[1], act[2], mb.rows(), width_, dx,
                         this->store_->grad(w_), this->store_->grad(b_), mb.scratch,
                         mb.max_threads);
}

template <typename T>
std::vector<SavedTensorSpec> LayerNormLayer<T>::DeferredTensors(
    const ActivationLimits &limits) const {
  return {{limits.max_rows() * width_}};
}

template <typename T>
void LayerNormLayer<T>::BackwardInput(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                                      LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
  std::memcpy(deferred[0], dout, size_t(mb.rows() * width_) * sizeof(T));
  if (!din) return;
  std::memset(din, 0, size_t(mb.rows() * width_) * sizeof(T));
  cpu::LayerNormBackward<T>(dout, in, this->store_->param(w_), act[1], act[2], mb.rows(), width_,
                            din, nullptr, nullptr, mb.scratch, mb.max_threads);
}

template <typename T>
void LayerNormLayer<T>::BackwardWeight(const T *in, const LayerActivations<T> &act,
                                       const LayerActivations<T> &deferred,
                                       const MicroBatch<T> &mb) {
  cpu::LayerNormParamBackward(deferred[0], in, act[1], act[2], mb.rows(), width_,
                              this->store_->grad(w_), this->store_->grad(b_), mb.scratch,
                              mb.max_threads);
}

// ---------------------------------------------------------------- losses

template <typename T>
void MseLossLayer<T>::Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) {
  act.loss = double(cpu::MseForward(in, mb.labels, mb.rows() * width_));
}

template <typename T>
void MseLossLayer<T>::Backward(const T *in, const LayerActivations<T> &, T *, T *din,
                               const MicroBatch<T> &mb) {
  if (din) cpu::MseBackward(in, mb.labels, mb.rows() * width_, mb.grad_scale, din);
}

// Saves the softmax probabilities [B, classes] (exact).
template <typename T>
std::vector<SavedTensorSpec> CrossEntropyLossLayer<T>::SavedTensors(
    const ActivationLimits &limits) const {
  return {{limits.max_rows() * classes_, true}};
}

template <typename T>
void CrossEntropyLossLayer<T>::Forward(const T *in, LayerActivations<T> &act,
                                       const MicroBatch<T> &mb) {
  std::memcpy(act[0], in, size_t(mb.rows() * classes_) * sizeof(T));
  act.loss = double(
      cpu::SoftmaxCrossEntropyForward(act[0], mb.targets, mb.rows(), classes_, &act.counted));
}

template <typename T>
void CrossEntropyLossLayer<T>::Backward(const T *, const LayerActivations<T> &act, T *, T *din,
                                        const MicroBatch<T> &mb) {
  if (din)
    cpu::SoftmaxCrossEntropyBackward(act[0], mb.targets, mb.rows(), classes_, act.counted,
                                     mb.grad_scale, din);
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
