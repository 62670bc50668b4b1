// Optimizers over one flat parameter range: AdamW, Adam (DeepSpeed's
// adam_w_mode) and SGD with momentum, with torch.optim's update rules. The
// state is flat too, aligned with the parameters, so a ZeRO shard is a range.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/runtime/memory.h"

namespace dst {

// A named flat state buffer, aligned element-for-element with the parameters.
struct OptimizerStateBuffer {
  std::string name;  // "exp_avg", "exp_avg_sq", "momentum_buffer"
  float *data;
  int64_t size;
};

class Optimizer {
 public:
  Optimizer(const OptimizerConfig &config, int64_t numel, MemoryTracker *tracker);

  // One update of params[0, numel) from grads at learning rate `lr`.
  void Step(float *params, const float *grads, double lr);
  // The same update in pieces (e.g. gradients converted from 16 bits a chunk
  // at a time): BeginStep once, then UpdateRange over ranges [begin, begin +
  // count) that together cover [0, numel) once. params/grads point at the
  // range's first element.
  void BeginStep() { ++steps_; }
  void UpdateRange(float *params, const float *grads, double lr, int64_t begin, int64_t count);

  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  const OptimizerConfig &config() const { return config_; }
  std::vector<OptimizerStateBuffer> StateBuffers();
  // "AdamW", "Adam", "SGD".
  const char *Name() const;

 private:
  OptimizerConfig config_;
  int64_t numel_;
  int64_t steps_ = 0;
  Buffer<float> state_a_;  // exp_avg or momentum_buffer [numel]
  Buffer<float> state_b_;  // exp_avg_sq [numel] (Adam only)
};

}  // namespace dst
