#include "core/optim/optimizer.h"

namespace dst {

namespace {
std::vector<std::string> StateNames(const OptimizerConfig &config) {
  if (config.type != OptimizerType::kSGD) return {"exp_avg", "exp_avg_sq"};
  if (config.momentum != 0) return {"momentum_buffer"};
  return {};
}
}  // namespace

Optimizer::Optimizer(const OptimizerConfig &config, int64_t numel, MemoryTracker *tracker,
                     bool master_weights, const StateStoreMaker &make_store,
                     StepPlacement placement)
    : config_(config), numel_(numel), master_(master_weights), placement_(placement) {
  std::vector<std::string> names;
  if (master_) names.push_back("master");
  for (std::string &n : StateNames(config)) names.push_back(std::move(n));
  if (make_store)
    state_ = make_store(std::move(names), numel, tracker);
  else
    state_ =
        std::make_unique<ResidentStateStore>(std::move(names), numel, tracker, placement.memory);
}

std::vector<std::string> Optimizer::state_names() const {
  return StateNames(config_);
}

void Optimizer::Step(float *params, const float *grads, double lr) {
  BeginStep();
  StatePiece piece;
  (void)AcquireState(0, numel_, &piece);  // resident: the whole range, cannot fail
  Update(piece, params, grads, lr);
  (void)ReleaseState(piece);
}

Status Optimizer::AcquireState(int64_t begin, int64_t count, StatePiece *piece) {
  return state_->Acquire(begin, count, piece);
}

void Optimizer::Update(const StatePiece &piece, float *params, const float *grads, double lr,
                       const UpdateFusion &fusion) {
  float *w = params ? params : piece.tensors[0];
  float *const *s = piece.tensors.data() + first_state_tensor();
  if (config_.type == OptimizerType::kSGD) {
    const SgdHyper h{
        lr,         config_.momentum, config_.dampening, config_.weight_decay, config_.nesterov,
        steps_ == 1};
    placement_.step().SgdUpdate(grads, piece.count, h, w, config_.momentum != 0 ? s[0] : nullptr);
    return;
  }
  const bool decoupled = config_.type == OptimizerType::kAdamW || config_.adam_w_mode;
  const AdamHyper h{lr,     config_.betas[0], config_.betas[1], config_.eps, config_.weight_decay,
                    steps_, decoupled, config_.bias_correction};
  AdamRange range;  // CPU-Adam: the widest vector path this CPU has
  range.param = w;
  range.grad = grads;
  range.exp_avg = s[0];
  range.exp_avg_sq = s[1];
  range.n = piece.count;
  range.grad_mul = fusion.grad_mul;
  range.half_out = fusion.half_out;
  range.half = fusion.half;
  placement_.step().AdamUpdate(range, h);
}

std::vector<OptimizerStateBuffer> Optimizer::StateBuffers() {
  std::vector<OptimizerStateBuffer> out;
  const std::vector<std::string> names = state_names();
  for (size_t k = 0; k < names.size(); ++k) {
    const float *data = state_->Resident(first_state_tensor() + k);
    if (data == nullptr) return {};
    out.push_back({names[k], const_cast<float *>(data), numel_});
  }
  return out;
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
