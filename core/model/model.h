// Model<T>: the ordered layers of a model spec, the flat parameter store they
// use, and the buffers that carry gradients between them.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/model/layer.h"
#include "core/model/model_spec.h"
#include "core/model/params.h"

namespace dst {

// Trainable parameters of a spec (tied weights once), without allocating.
int64_t CountParameters(const ModelSpec &spec);

template <typename T>
class Model {
 public:
  // Builds the layers, allocates parameters and gradients, initialises the
  // weights from spec.seed, and reserves activations for `limits`.
  // Parameter buffers are padded to a multiple of `pad_multiple` (dp size).
  Model(const ModelSpec &spec, const ActivationLimits &limits, MemoryTracker *tracker,
        int64_t pad_multiple = 1);

  // Runs every layer forward; returns the micro-batch's mean loss.
  double Forward(MicroBatch<T> &mb);
  // Called after each layer's backward with the lowest parameter offset whose
  // gradients can still change: everything at or above it is final.
  using GradientsFinalHook = std::function<void(int64_t boundary)>;
  // Runs every layer backward, accumulating parameter gradients (scaled by
  // mb.grad_scale). Must follow Forward on the same micro-batch.
  void Backward(MicroBatch<T> &mb, const GradientsFinalHook &hook = nullptr);

  ParamStore<T> &params() { return *store_; }
  const ParamStore<T> &params() const { return *store_; }
  const ModelSpec &spec() const { return spec_; }
  const ActivationLimits &limits() const { return limits_; }
  const std::vector<std::unique_ptr<Layer<T>>> &layers() const { return layers_; }
  // Forward FLOPs of one micro-batch of B samples of T tokens.
  double ForwardFlops(int64_t B, int64_t seq) const;

 private:
  ModelSpec spec_;
  ActivationLimits limits_;
  std::vector<std::unique_ptr<Layer<T>>> layers_;
  std::vector<int64_t> first_offset_;  // per layer: lowest offset of the params it writes
  std::unique_ptr<ParamStore<T>> store_;
  Buffer<T> grad_a_, grad_b_;  // [max_rows, max width] ping-pong input/output gradients
  Buffer<T> scratch_;          // [max over layers of ScratchSize]
};

}  // namespace dst
