// Layers of sequential models as in DeepSpeed's PipelineModule examples:
// Linear, ReLU, GELU, LayerNorm, and the MSE / cross-entropy losses.
// Rows are samples: activations are [B, features]. Under sequence
// parallelism (`rows`: the tp group, sequence_parallel.h) the layers outside
// the tensor-parallel regions hold this tp rank's B / tp rows: LayerNorm's
// parameter gradients are summed over the group, a loss is the mean over
// every rank's rows.
#pragma once

#include <string>

#include "core/layers/layer.h"
#include "core/tensor_parallel/tp_group.h"

namespace dst {

// y = x W^T + b, W [out, in]; PyTorch's default init U(-1/sqrt(in), 1/sqrt(in)).
template <typename T>
class LinearLayer final : public Layer<T> {
 public:
  LinearLayer(const std::string &prefix, int64_t in, int64_t out, bool bias,
              ParamRegistry &registry);
  std::string_view Kind() const override { return "linear"; }
  int64_t OutWidth() const override { return out_features_; }
  std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &limits) const override;
  void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                const MicroBatch<T> &mb) override;
  // Deferred: the output gradient [B, out].
  std::vector<SavedTensorSpec> DeferredTensors(const ActivationLimits &limits) const override;
  void BackwardInput(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                     LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  void BackwardWeight(const T *in, const LayerActivations<T> &act,
                      const LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  ModuleSet Modules() const override { return {ModuleType::kLinear}; }
  double ForwardFlops(int64_t B, int64_t) const override {
    return 2.0 * double(B) * double(in_features_) * double(out_features_);
  }

 private:
  int64_t in_features_, out_features_;
  int w_ = -1, b_ = -1;
};

// ReLU or GELU (tanh approximation).
template <typename T>
class ActivationLayer final : public Layer<T> {
 public:
  enum class Fn { kRelu, kGelu };
  ActivationLayer(Fn fn, int64_t width, const TensorParallelGroup &rows = {})
      : fn_(fn), width_(width), rows_(rows) {}
  std::string_view Kind() const override { return fn_ == Fn::kRelu ? "relu" : "gelu"; }
  int64_t OutWidth() const override { return width_; }
  std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &limits) const override;
  void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                const MicroBatch<T> &mb) override;
  double ForwardFlops(int64_t, int64_t) const override { return 0.0; }

 private:
  Fn fn_;
  int64_t width_;
  TensorParallelGroup rows_;
};

template <typename T>
class LayerNormLayer final : public Layer<T> {
 public:
  LayerNormLayer(const std::string &prefix, int64_t width, ParamRegistry &registry,
                 const TensorParallelGroup &rows = {});
  std::string_view Kind() const override { return "layernorm"; }
  int64_t OutWidth() const override { return width_; }
  std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &limits) const override;
  int64_t ScratchSize(const ActivationLimits &limits) const override {
    // partial sums [threads, 2*width] | input gradient when first [rows, width]
    // (sequence-parallel: this rank's parameter gradients [2*width])
    return int64_t(limits.max_threads) * 2 * width_ + limits.max_rows() * width_;
  }
  void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                const MicroBatch<T> &mb) override;
  // Deferred: the output gradient [B, out].
  std::vector<SavedTensorSpec> DeferredTensors(const ActivationLimits &limits) const override;
  void BackwardInput(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                     LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  void BackwardWeight(const T *in, const LayerActivations<T> &act,
                      const LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  ModuleSet Modules() const override { return {ModuleType::kLayerNorm}; }
  double ForwardFlops(int64_t, int64_t) const override { return 0.0; }

 private:
  // dweight, dbias (+=) from `dout` over this rank's rows; sequence-parallel:
  // summed over the group first. False on failure.
  bool ParamGradients(const T *dout, const T *in, const LayerActivations<T> &act,
                      const MicroBatch<T> &mb);

  int64_t width_;
  int w_ = -1, b_ = -1;
  TensorParallelGroup rows_;
};

// Mean squared error against labels [B, width] (torch.nn.MSELoss).
template <typename T>
class MseLossLayer final : public Layer<T> {
 public:
  explicit MseLossLayer(int64_t width, const TensorParallelGroup &rows = {})
      : width_(width), rows_(rows) {}
  std::string_view Kind() const override { return "mse_loss"; }
  int64_t OutWidth() const override { return 0; }
  std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &) const override { return {}; }
  void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                const MicroBatch<T> &mb) override;
  bool IsLoss() const override { return true; }
  double ForwardFlops(int64_t, int64_t) const override { return 0.0; }

 private:
  int64_t width_;
  TensorParallelGroup rows_;
};

// Softmax cross-entropy of logits [B, classes] against class ids [B]
// (torch.nn.CrossEntropyLoss, ignore_index -1).
template <typename T>
class CrossEntropyLossLayer final : public Layer<T> {
 public:
  explicit CrossEntropyLossLayer(int64_t classes, const TensorParallelGroup &rows = {})
      : classes_(classes), rows_(rows) {}
  std::string_view Kind() const override { return "cross_entropy_loss"; }
  int64_t OutWidth() const override { return 0; }
  std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &limits) const override;
  void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                const MicroBatch<T> &mb) override;
  bool IsLoss() const override { return true; }
  double ForwardFlops(int64_t, int64_t) const override { return 0.0; }

 private:
  int64_t classes_;
  TensorParallelGroup rows_;
};

}  // namespace dst
