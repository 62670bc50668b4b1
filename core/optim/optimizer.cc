#include "core/optim/optimizer.h"

#include "core/kernels/cpu/optimizers.h"

namespace dst {

Optimizer::Optimizer(const OptimizerConfig &config, int64_t numel, MemoryTracker *tracker)
    : config_(config), numel_(numel) {
  const auto cat = MemoryCategory::kOptimizerState;
  const bool adam = config.type != OptimizerType::kSGD;
  if (adam || config.momentum != 0) state_a_ = Buffer<float>(tracker, cat, size_t(numel));
  if (adam) state_b_ = Buffer<float>(tracker, cat, size_t(numel));
}

void Optimizer::Step(float *params, const float *grads, double lr) {
  BeginStep();
  UpdateRange(params, grads, lr, 0, numel_);
}

void Optimizer::UpdateRange(float *params, const float *grads, double lr, int64_t begin,
                            int64_t count) {
  if (config_.type == OptimizerType::kSGD) {
    const cpu::SgdHyper h{
        lr,         config_.momentum, config_.dampening, config_.weight_decay, config_.nesterov,
        steps_ == 1};
    float *momentum = state_a_.size() ? state_a_.data() + begin : nullptr;
    cpu::SgdUpdate(params, grads, momentum, count, h);
    return;
  }
  const bool decoupled = config_.type == OptimizerType::kAdamW || config_.adam_w_mode;
  const cpu::AdamHyper h{
      lr, config_.betas[0], config_.betas[1], config_.eps, config_.weight_decay, steps_, decoupled};
  cpu::AdamUpdate(params, grads, state_a_.data() + begin, state_b_.data() + begin, count, h);
}

std::vector<OptimizerStateBuffer> Optimizer::StateBuffers() {
  if (config_.type == OptimizerType::kSGD) {
    if (state_a_.size() == 0) return {};
    return {{"momentum_buffer", state_a_.data(), numel_}};
  }
  return {{"exp_avg", state_a_.data(), numel_}, {"exp_avg_sq", state_b_.data(), numel_}};
}

const char *Optimizer::Name() const {
  switch (config_.type) {
    case OptimizerType::kAdamW:
      return "AdamW";
    case OptimizerType::kAdam:
      return "Adam";
    case OptimizerType::kSGD:
      return "SGD";
  }
  return "?";
}

}  // namespace dst
