// Parameter gathering, the layer hook of ZeRO stage 3 (and of 16-bit
// training's working copies at stages 0-2, over a group of one): each layer's
// parameters gathered (widened) before it runs, the next layer's prefetched
// in the direction the pass goes. The partition itself, which the optimizer
// writes, is ParameterPartition.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/model/model.h"
#include "core/zero/param_partition.h"

namespace dst {

class ParamGathering final : public LayerHooks {
 public:
  // `params` must outlive this object; `layers`: the model's layer count.
  ParamGathering(ParameterPartition *params, size_t layers) : params_(params), layers_(layers) {}

  Status BeforeForward(size_t layer) override {
    return params_->Acquire(layer, layer + 1 < layers_ ? int64_t(layer + 1) : -1);
  }
  Status BeforeBackward(size_t layer) override {
    return params_->Acquire(layer, int64_t(layer) - 1);
  }
  // Split backward: the input half reads the layer's parameters; the weight
  // half reads none (a recomputed forward acquires them through BeforeForward).
  Status BeforeInputGradient(size_t layer) override {
    return params_->Acquire(layer, int64_t(layer) - 1);
  }

 private:
  ParameterPartition *params_;
  size_t layers_;
};

}  // namespace dst
