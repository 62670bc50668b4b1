// Model<T>: the ordered layers of a model spec, the flat parameter store they
// use, and the buffers that carry gradients between them.
#pragma once

#include <memory>
#include <vector>

#include "core/model/layer.h"
#include "core/model/model_spec.h"
#include "core/model/params.h"

namespace dst {

template <typename T>
class Model {
 public:
  // Builds the layers, allocates parameters and gradients, initialises the
  // weights from spec.seed, and reserves activations for `limits`.
  Model(const ModelSpec &spec, const ActivationLimits &limits, MemoryTracker *tracker);

  // Runs every layer forward; returns the micro-batch's mean loss.
  double Forward(MicroBatch<T> &mb);
  // Runs every layer backward, accumulating parameter gradients (scaled by
  // mb.grad_scale). Must follow Forward on the same micro-batch.
  void Backward(MicroBatch<T> &mb);

  ParamStore<T> &params() { return *store_; }
  const ParamStore<T> &params() const { return *store_; }
  const ModelSpec &spec() const { return spec_; }
  const ActivationLimits &limits() const { return limits_; }
  const std::vector<std::unique_ptr<Layer<T>>> &layers() const { return layers_; }
  // Forward FLOPs of one micro-batch of B samples of T tokens.
  double ForwardFlops(int64_t B, int64_t seq) const;

 private:
  void BuildGpt(ParamRegistry &registry);
  void BuildSequential(ParamRegistry &registry);

  ModelSpec spec_;
  ActivationLimits limits_;
  std::vector<std::unique_ptr<Layer<T>>> layers_;
  std::unique_ptr<ParamStore<T>> store_;
  Buffer<T> grad_a_, grad_b_;  // [max_rows, max width] ping-pong input/output gradients
  Buffer<T> scratch_;          // [max over layers of ScratchSize]
};

}  // namespace dst
