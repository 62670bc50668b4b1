#include "core/optim/optimizer.h"

#include <algorithm>

namespace dst {

namespace {
std::vector<std::string> StateNames(const OptimizerConfig &config) {
  // 1-bit LAMB: the variance the exchanged momenta imply, beside the frozen one.
  if (config.type == OptimizerType::kOneBitLamb)
    return {"exp_avg", "exp_avg_sq", "exp_avg_sq_fresh"};
  if (config.type != OptimizerType::kSGD) return {"exp_avg", "exp_avg_sq"};
  if (config.momentum != 0) return {"momentum_buffer"};
  return {};
}
}  // namespace

Optimizer::Optimizer(const OptimizerConfig &config, int64_t numel, MemoryTracker *tracker,
                     bool master_weights, const StateStoreMaker &make_store,
                     StepPlacement placement)
    : config_(config),
      numel_(numel),
      master_(master_weights),
      placement_(placement),
      policy_(config) {
  std::vector<std::string> names;
  if (master_) names.push_back("master");
  for (std::string &n : StateNames(config)) names.push_back(std::move(n));
  if (make_store)
    state_ = make_store(std::move(names), numel, tracker);
  else
    state_ =
        std::make_unique<ResidentStateStore>(std::move(names), numel, tracker, placement.memory);
  if (config.type == OptimizerType::kLamb || config.type == OptimizerType::kOneBitLamb)
    SetTensorParts({{0, 0, numel}}, 1);
  if (config.type == OptimizerType::kOneBitLamb)
    m_last_ = Buffer<float>(tracker, MemoryCategory::kOptimizerState, size_t(numel));
  if (config.type == OptimizerType::kZeroOneAdam)
    accumulator_ = Buffer<float>(tracker, MemoryCategory::kOptimizerState, size_t(numel));
}

Optimizer::Exchange Optimizer::exchange() const {
  switch (config_.type) {
    case OptimizerType::kLamb:
      return Exchange::kTrustSums;
    case OptimizerType::kOneBitAdam:
      return compressing() ? Exchange::kMomentum : Exchange::kNone;
    case OptimizerType::kZeroOneAdam:
      return kind_ == ZeroOneStep::kCompressed || kind_ == ZeroOneStep::kSync
                 ? Exchange::kAccumulator
                 : Exchange::kNone;
    case OptimizerType::kOneBitLamb:
      return steps_ > config_.freeze_step ? Exchange::kMomentum : Exchange::kTrustSums;
    default:
      return Exchange::kNone;
  }
}

bool Optimizer::ReducesGradients(int64_t step) const {
  if (config_.type == OptimizerType::kOneBitAdam) return !CompressesStep(step);
  if (config_.type == OptimizerType::kOneBitLamb) return step <= config_.freeze_step;
  if (config_.type != OptimizerType::kZeroOneAdam) return true;
  if (step == steps_ + 1) return policy_.Next() == ZeroOneStep::kVariance;
  ZeroOnePolicy at(config_);
  at.Reset(step - 1);
  return at.Next() == ZeroOneStep::kVariance;
}

void Optimizer::set_steps_taken(int64_t steps) {
  steps_ = steps;
  if (config_.type != OptimizerType::kZeroOneAdam) return;
  policy_.Reset(steps);
  kind_ = ZeroOneStep::kVariance;
  if (steps > 0) {  // BeginStep reads the last step's kind
    ZeroOnePolicy last(config_);
    last.Reset(steps - 1);
    kind_ = last.Next();
  }
  std::fill_n(accumulator_.data(), accumulator_.size(), 0.0f);
  lrs_ = 0;
}

void Optimizer::SetTensorParts(std::vector<TensorPart> parts, int tensors) {
  std::sort(parts.begin(), parts.end(),
            [](const TensorPart &a, const TensorPart &b) { return a.begin < b.begin; });
  parts_ = std::move(parts);
  trust_sums_.assign(size_t(2 * tensors), 0.0);
  trust_.assign(size_t(tensors), 1.0f);
  onebit_lamb_.assign(size_t(tensors), {});
  partials_.assign(size_t(tensors), {});
  scales_.assign(size_t(tensors), 0.0f);
}

std::vector<float> Optimizer::PerTensorScalars() const {
  std::vector<float> out;
  if (config_.type != OptimizerType::kOneBitLamb) return out;
  for (const cpu::OneBitLambTensor &t : onebit_lamb_)
    out.insert(out.end(), {t.scaling, t.coeff_freeze, t.last_factor});
  return out;
}

Status Optimizer::SetPerTensorScalars(const std::vector<float> &values) {
  if (values.size() != 3 * onebit_lamb_.size())
    return InvalidArgument("the checkpoint holds " + std::to_string(values.size()) +
                           " per-tensor optimizer values, this optimizer keeps " +
                           std::to_string(3 * onebit_lamb_.size()));
  for (size_t t = 0; t < onebit_lamb_.size(); ++t)
    onebit_lamb_[t] = {values[3 * t], values[3 * t + 1], values[3 * t + 2]};
  return Status::Ok();
}

// 1-bit LAMB's first compressed step: each tensor's momentum scaled towards
// the tensors' mean RMS, so that one 1-bit exchange of all of them loses
// little on the small ones. A tensor's RMS is over its slices, the mean over
// the model's tensors (each counted once).
Status Optimizer::FreezeScalingsIfDue(const TensorReducers &reducers) {
  if (config_.type != OptimizerType::kOneBitLamb || steps_ != config_.freeze_step + 1)
    return Status::Ok();
  const float *m = state_->Resident(first_state_tensor());
  if (m == nullptr) return Status::Ok();  // a store elsewhere: refused by the config gate
  const size_t tensors = onebit_lamb_.size();
  std::vector<double> sums(2 * tensors, 0.0);  // sum m^2, elements
  for (const TensorPart &p : parts_) {
    for (int64_t i = p.begin; i < p.begin + p.count; ++i)
      sums[2 * size_t(p.tensor)] += double(m[i]) * m[i];
    sums[2 * size_t(p.tensor) + 1] += double(p.count);
  }
  if (reducers.sum_over_slices) DST_RETURN_IF_ERROR(reducers.sum_over_slices(&sums, 2));
  std::vector<double> rms(tensors, 0.0);
  double united = 0, counted = 0;
  for (size_t t = 0; t < tensors; ++t) {
    if (sums[2 * t + 1] == 0) continue;
    rms[t] = std::sqrt(sums[2 * t] / sums[2 * t + 1]);
    const auto &elsewhere = reducers.counted_elsewhere;
    if (std::find(elsewhere.begin(), elsewhere.end(), int(t)) != elsewhere.end()) continue;
    united += rms[t];
    counted += 1;
  }
  if (reducers.sum_over_stages) {
    Result<double> all = reducers.sum_over_stages(united);
    if (!all.ok()) return all.status();
    Result<double> count = reducers.sum_over_stages(counted);
    if (!count.ok()) return count.status();
    united = all.value(), counted = count.value();
  }
  united /= std::max(counted, 1.0);
  for (size_t t = 0; t < tensors; ++t)
    onebit_lamb_[t].scaling = rms[t] > 0 ? float(united / rms[t]) : 1.0f;
  return Status::Ok();
}

Status Optimizer::BeginFinishPass(const TensorReducers &reducers) {
  const size_t tensors = partials_.size();
  std::vector<double> sums(2 * tensors), maxima(tensors);
  for (size_t t = 0; t < tensors; ++t) {
    sums[2 * t] = partials_[t].prelim2;
    sums[2 * t + 1] = partials_[t].update2;
    maxima[t] = partials_[t].ratio_max;
  }
  if (reducers.sum_over_slices) DST_RETURN_IF_ERROR(reducers.sum_over_slices(&sums, 2));
  if (reducers.max_over_slices) DST_RETURN_IF_ERROR(reducers.max_over_slices(&maxima));
  const LambHyper h = LambHyperNow(lr_);
  const cpu::OneBitLambBounds bounds{config_.factor_max, config_.factor_min,
                                     config_.factor_threshold};
  for (size_t t = 0; t < tensors; ++t)
    scales_[t] = cpu::OneBitLambScale({maxima[t], sums[2 * t], sums[2 * t + 1]}, h, bounds,
                                      &onebit_lamb_[t]);
  factor_pass_ = false;
  return Status::Ok();
}

void Optimizer::BeginStep() {
  ++steps_;
  applying_ = false;
  if (config_.type == OptimizerType::kZeroOneAdam) {
    if (kind_ == ZeroOneStep::kSync) lrs_ = 0;  // the last step synchronised
    // The accumulator held exchanged gradients until the freeze; from it on
    // it sums the local steps.
    if (RestartsExchangeErrors(steps_)) std::fill_n(accumulator_.data(), accumulator_.size(), 0.0f);
    kind_ = policy_.Next();
    policy_.Advance();
  }
  factor_pass_ = false;
  std::fill(trust_sums_.begin(), trust_sums_.end(), 0.0);
}

void Optimizer::BeginApplyPass() {
  applying_ = true;
  if (onebit_lamb_compressing()) {
    factor_pass_ = true;
    std::fill(partials_.begin(), partials_.end(), cpu::OneBitLambPartial{});
    return;
  }
  if (exchange() != Exchange::kTrustSums) return;
  const LambHyper h = LambHyperNow(0);
  for (size_t t = 0; t < trust_.size(); ++t)
    trust_[t] = cpu::LambTrustRatio({trust_sums_[2 * t], trust_sums_[2 * t + 1]}, h);
  if (config_.type != OptimizerType::kOneBitLamb) return;
  // 1-bit LAMB's warm-up: each tensor's running average of its ratio, which
  // it keeps (rescaled) once the momenta travel in 1 bit.
  const float beta = float(config_.coeff_beta);
  for (size_t t = 0; t < trust_.size(); ++t)
    if (trust_[t] != 1.0f)
      onebit_lamb_[t].coeff_freeze = beta * onebit_lamb_[t].coeff_freeze + (1 - beta) * trust_[t];
}

// DeepSpeed's OnebitAdam: Adam without bias correction, the decay decoupled;
// past freeze_step the momentum alone (the variance frozen), then the
// weights from the momentum the ranks exchanged.
void Optimizer::OneBitAdamUpdate(const AdamRange &range, const AdamHyper &h) {
  const StepKernels &step = placement_.step();
  if (!compressing()) return step.AdamUpdate(range, h);
  if (applying_) return step.AdamApply(range, h);
  step.AdamMomentum(range, h);
  if (range.half_out) step.Narrow16(range.half, range.param, range.n, range.half_out);
}

LambHyper Optimizer::LambHyperNow(double lr) const {
  LambHyper h;
  h.lr = lr;
  h.beta1 = config_.betas[0];
  h.beta2 = config_.betas[1];
  h.eps = config_.eps;
  h.weight_decay = config_.weight_decay;
  h.step = steps_;
  h.bias_correction = config_.bias_correction;
  h.eps_inside_sqrt = config_.eps_inside_sqrt;
  h.max_coeff = config_.max_coeff;
  h.min_coeff = config_.min_coeff;
  return h;
}

// Each tensor part inside the piece runs the pass's kernel; the elements no
// part covers (the shard's padding) keep their value, their 16-bit copy written.
void Optimizer::LambUpdate(const StatePiece &piece, float *w, const float *grads,
                           const UpdateFusion &fusion) {
  const StepKernels &step = placement_.step();
  float *const *s = piece.tensors.data() + first_state_tensor();
  const LambHyper h = LambHyperNow(lr_);
  const int64_t end = piece.begin + piece.count;
  auto first = std::upper_bound(parts_.begin(), parts_.end(), piece.begin,
                                [](int64_t at, const TensorPart &p) { return at < p.begin; });
  if (first != parts_.begin()) --first;
  int64_t at = piece.begin;  // range element: everything before it is done
  const auto untouched = [&](int64_t until) {
    if (fusion.half_out && until > at)
      step.Narrow16(fusion.half, w + (at - piece.begin), until - at,
                    fusion.half_out + (at - piece.begin));
    at = std::max(at, until);
  };
  for (auto p = first; p != parts_.end() && p->begin < end; ++p) {
    const int64_t a = std::max(p->begin, piece.begin), b = std::min(p->begin + p->count, end);
    if (a >= b) continue;
    untouched(a);
    const int64_t o = a - piece.begin;
    LambRange r;
    r.param = w + o;
    r.grad = grads ? grads + o : nullptr;
    r.exp_avg = s[0] + o;
    r.exp_avg_sq = s[1] + o;
    r.n = b - a;
    r.grad_mul = fusion.grad_mul;
    r.half_out = fusion.half_out ? fusion.half_out + o : nullptr;
    r.half = fusion.half;
    const size_t t = size_t(p->tensor);
    if (onebit_lamb_compressing()) {
      float *m_last = m_last_.data() + a;
      if (factor_pass_) {
        const cpu::OneBitLambPartial part =
            step.OneBitLambStats(r, h, m_last, s[2] + o, onebit_lamb_[t].scaling);
        cpu::OneBitLambPartial &whole = partials_[t];
        whole.ratio_max = std::max(whole.ratio_max, part.ratio_max);
        whole.prelim2 += part.prelim2;
        whole.update2 += part.update2;
      } else if (applying_) {
        step.OneBitLambFinish(r, h, scales_[t]);
      } else {
        step.OneBitLambMomentum(r, h, onebit_lamb_[t].scaling, m_last);
      }
    } else if (applying_) {
      step.LambApply(r, h, trust_[t]);
    } else {
      const LambSums sums = step.LambMoments(r, h);
      trust_sums_[2 * t] += sums.weight;
      trust_sums_[2 * t + 1] += sums.update;
      // 1-bit LAMB: the fresh variance starts as the variance at the freeze.
      if (config_.type == OptimizerType::kOneBitLamb && steps_ == config_.freeze_step)
        step.CopyRange(r.exp_avg_sq, r.n, s[2] + o);
    }
    at = b;
  }
  untouched(end);
}

std::vector<std::string> Optimizer::state_names() const {
  return StateNames(config_);
}

void Optimizer::Step(float *params, const float *grads, double lr) {
  BeginStep();
  StatePiece piece;
  (void)AcquireState(0, numel_, &piece);  // resident: the whole range, cannot fail
  (void)FreezeScalingsIfDue({});          // no reducers: nothing to fail
  Update(piece, params, grads, lr);
  if (two_pass()) {  // the range holds its tensors whole
    BeginApplyPass();
    if (factor_pass()) {
      Update(piece, params, grads, lr);
      (void)BeginFinishPass({});
    }
    Update(piece, params, grads, lr);
  }
  (void)ReleaseState(piece);
}

Status Optimizer::AcquireState(int64_t begin, int64_t count, StatePiece *piece) {
  return state_->Acquire(begin, count, piece);
}

void Optimizer::Update(const StatePiece &piece, float *params, const float *grads, double lr,
                       const UpdateFusion &fusion) {
  float *w = params ? params : piece.tensors[0];
  if (config_.type == OptimizerType::kLamb || config_.type == OptimizerType::kOneBitLamb) {
    lr_ = lr;
    return LambUpdate(piece, w, grads, fusion);
  }
  float *const *s = piece.tensors.data() + first_state_tensor();
  if (config_.type == OptimizerType::kSGD) {
    const SgdHyper h{
        lr,         config_.momentum, config_.dampening, config_.weight_decay, config_.nesterov,
        steps_ == 1};
    placement_.step().SgdUpdate(grads, piece.count, h, w, config_.momentum != 0 ? s[0] : nullptr);
    return;
  }
  const bool decoupled = config_.type != OptimizerType::kAdam || config_.adam_w_mode;
  const AdamHyper h{lr,          config_.betas[0],       config_.betas[1],
                    config_.eps, config_.weight_decay,   steps_,
                    decoupled,   config_.bias_correction};
  AdamRange range;  // CPU-Adam: the widest vector path this CPU has
  range.param = w;
  range.grad = grads;
  range.exp_avg = s[0];
  range.exp_avg_sq = s[1];
  range.n = piece.count;
  range.grad_mul = fusion.grad_mul;
  range.half_out = fusion.half_out;
  range.half = fusion.half;
  if (config_.type == OptimizerType::kOneBitAdam) return OneBitAdamUpdate(range, h);
  if (config_.type == OptimizerType::kZeroOneAdam) return ZeroOneAdamUpdate(piece, range, h);
  placement_.step().AdamUpdate(range, h);
}

// DeepSpeed's ZeroOneAdam, one kind of step at a time (zero_one_policy.h).
void Optimizer::ZeroOneAdamUpdate(const StatePiece &piece, const AdamRange &range,
                                  const AdamHyper &h) {
  using cpu::ZeroOnePhase;
  const StepKernels &step = placement_.step();
  float *acc = accumulator_.data() + piece.begin;
  switch (kind_) {
    case ZeroOneStep::kVariance:
      return step.AdamUpdate(range, h);
    case ZeroOneStep::kCompressed:
      if (!applying_) return step.ZeroOneUpdate(range, h, ZeroOnePhase::kCapture, acc, 0);
      {
        AdamRange exchanged = range;  // the momentum from the exchanged gradient
        exchanged.grad = acc;
        exchanged.grad_mul = 1.0f;
        step.AdamMomentum(exchanged, h);
        return step.AdamApply(exchanged, h);
      }
    case ZeroOneStep::kLocal:
    case ZeroOneStep::kSync:
      if (applying_) return step.ZeroOneUpdate(range, h, ZeroOnePhase::kSyncIn, acc, float(lrs_));
      if (piece.begin == 0) lrs_ += h.lr;  // once a step: the first piece
      step.ZeroOneUpdate(range, h, ZeroOnePhase::kLocal, acc, 0);
      if (kind_ == ZeroOneStep::kSync) step.ZeroOneUpdate(range, h, ZeroOnePhase::kSyncOut, acc, 0);
      return;
  }
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
    case OptimizerType::kLamb:
      return "Lamb";
    case OptimizerType::kOneBitAdam:
      return "OneBitAdam";
    case OptimizerType::kZeroOneAdam:
      return "ZeroOneAdam";
    case OptimizerType::kOneBitLamb:
      return "OneBitLamb";
  }
  return "?";
}

}  // namespace dst
