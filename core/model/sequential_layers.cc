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

template <typename T>
void LinearLayer<T>::Reserve(const ActivationLimits &limits, MemoryTracker *tracker) {
  out_ = Buffer<T>(tracker, MemoryCategory::kActivations, limits.max_rows() * out_features_);
}

template <typename T>
const T *LinearLayer<T>::Forward(const T *in, const MicroBatch<T> &mb) {
  in_ = in;
  cpu::LinearForward(in_, this->store_->param(w_), b_ >= 0 ? this->store_->param(b_) : nullptr,
                     mb.rows(), in_features_, out_features_, out_.data());
  return out_.data();
}

template <typename T>
void LinearLayer<T>::Backward(T *dout, T *din, const MicroBatch<T> &mb) {
  cpu::LinearBackward(dout, in_, this->store_->param(w_), mb.rows(), in_features_, out_features_,
                      din, this->store_->grad(w_), b_ >= 0 ? this->store_->grad(b_) : nullptr);
}

// ---------------------------------------------------------------- activations

template <typename T>
void ActivationLayer<T>::Reserve(const ActivationLimits &limits, MemoryTracker *tracker) {
  out_ = Buffer<T>(tracker, MemoryCategory::kActivations, limits.max_rows() * width_);
}

template <typename T>
const T *ActivationLayer<T>::Forward(const T *in, const MicroBatch<T> &mb) {
  in_ = in;
  if (fn_ == Fn::kRelu)
    cpu::ReluForward(in, mb.rows() * width_, out_.data());
  else
    cpu::GeluForward(in, mb.rows() * width_, out_.data());
  return out_.data();
}

template <typename T>
void ActivationLayer<T>::Backward(T *dout, T *din, const MicroBatch<T> &mb) {
  if (!din) return;
  if (fn_ == Fn::kRelu)
    cpu::ReluBackward(dout, in_, mb.rows() * width_, din);
  else
    cpu::GeluBackward(dout, in_, mb.rows() * width_, din);
}

// ---------------------------------------------------------------- layernorm

template <typename T>
LayerNormLayer<T>::LayerNormLayer(const std::string &prefix, int64_t width, ParamRegistry &registry)
    : width_(width) {
  w_ = registry.Add(prefix + ".weight", {width}, ParamInit::Constant(1));
  b_ = registry.Add(prefix + ".bias", {width}, ParamInit::Constant(0));
}

template <typename T>
void LayerNormLayer<T>::Reserve(const ActivationLimits &limits, MemoryTracker *tracker) {
  const auto act = MemoryCategory::kActivations;
  out_ = Buffer<T>(tracker, act, limits.max_rows() * width_);
  mean_ = Buffer<T>(tracker, act, limits.max_rows());
  rstd_ = Buffer<T>(tracker, act, limits.max_rows());
}

template <typename T>
const T *LayerNormLayer<T>::Forward(const T *in, const MicroBatch<T> &mb) {
  in_ = in;
  cpu::LayerNormForward(in, this->store_->param(w_), this->store_->param(b_), mb.rows(), width_,
                        out_.data(), mean_.data(), rstd_.data());
  return out_.data();
}

template <typename T>
void LayerNormLayer<T>::Backward(T *dout, T *din, const MicroBatch<T> &mb) {
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
  cpu::LayerNormBackward(dout, in_, this->store_->param(w_), mean_.data(), rstd_.data(), mb.rows(),
                         width_, dx, this->store_->grad(w_), this->store_->grad(b_), mb.scratch,
                         mb.max_threads);
}

// ---------------------------------------------------------------- losses

template <typename T>
const T *MseLossLayer<T>::Forward(const T *in, const MicroBatch<T> &mb) {
  in_ = in;
  loss_ = double(cpu::MseForward(in, mb.labels, mb.rows() * width_));
  return nullptr;
}

template <typename T>
void MseLossLayer<T>::Backward(T *, T *din, const MicroBatch<T> &mb) {
  if (din) cpu::MseBackward(in_, mb.labels, mb.rows() * width_, mb.grad_scale, din);
}

template <typename T>
void CrossEntropyLossLayer<T>::Reserve(const ActivationLimits &limits, MemoryTracker *tracker) {
  probs_ = Buffer<T>(tracker, MemoryCategory::kActivations, limits.max_rows() * classes_);
}

template <typename T>
const T *CrossEntropyLossLayer<T>::Forward(const T *in, const MicroBatch<T> &mb) {
  std::memcpy(probs_.data(), in, size_t(mb.rows() * classes_) * sizeof(T));
  loss_ = double(
      cpu::SoftmaxCrossEntropyForward(probs_.data(), mb.targets, mb.rows(), classes_, &counted_));
  return nullptr;
}

template <typename T>
void CrossEntropyLossLayer<T>::Backward(T *, T *din, const MicroBatch<T> &mb) {
  if (din)
    cpu::SoftmaxCrossEntropyBackward(probs_.data(), mb.targets, mb.rows(), classes_, counted_,
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
