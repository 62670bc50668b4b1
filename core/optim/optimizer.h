// The optimizer of one flat parameter range — the whole model, or this
// rank's ZeRO shard: AdamW, Adam (DeepSpeed's adam_w_mode) and SGD with
// momentum, with torch.optim's update rules, and Lamb (DeepSpeed's
// FusedLamb), whose per-tensor trust ratio makes a step two passes (below). Its state (and, under
// mixed precision, the fp32 master weights it updates) lives in a StateStore aligned with the
// range, read and written a piece at a time, so a ZeRO shard is a range and a store elsewhere than
// memory plugs in.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/kernels/step_kernels.h"
#include "core/optim/state_store.h"
#include "core/optim/zero_one_policy.h"
#include "core/precision/half_ops.h"
#include "core/runtime/memory.h"

namespace dst {

// A named flat state buffer, aligned element-for-element with the parameters.
struct OptimizerStateBuffer {
  std::string name;  // "exp_avg", "exp_avg_sq", "momentum_buffer"
  float *data;
  int64_t size;
};

// Makes the store for the state tensors `names` of `numel` elements (e.g. on
// NVMe); the optimizer calls it once. Unset: in memory.
// How Lamb's and 1-bit LAMB's per-tensor values reach the ranks that hold
// the rest of the model, so that each tensor is moved as a whole and the
// model's mean is the whole model's: `sum_over_slices` adds the values of
// the parts other tensor-parallel ranks hold ([k x tensors], k a tensor; a
// tensor every rank holds whole counted once), `max_over_slices` takes their
// maximum ([tensors]), `sum_over_stages` adds a value over the pipeline's
// stages, and `counted_elsewhere` are tensors another stage counts (a tied
// weight's second copy). An unset member: nothing to reduce there.
struct TensorReducers {
  std::function<Status(std::vector<double> *values, int per_tensor)> sum_over_slices;
  std::function<Status(std::vector<double> *values)> max_over_slices;
  std::function<Result<double>(double value)> sum_over_stages;
  std::vector<int> counted_elsewhere;
};
// A gradient norm's square over this group, with the other groups' shares
// added (a pipeline's stages, a tensor-parallel group).
using NormReducer = std::function<Result<double>(double squared)>;

using StateStoreMaker = std::function<std::unique_ptr<StateStore>(
    std::vector<std::string> names, int64_t numel, MemoryTracker *tracker)>;

// What CPU-Adam does in the same pass as the update (Adam and AdamW; SGD
// takes neither): the gradient multiplied first (unscale x clip), the
// updated weights written in 16 bits.
struct UpdateFusion {
  float grad_mul = 1.0f;
  uint16_t *half_out = nullptr;  // [piece.count], or null
  Half half = Half::kBf16;
};

// Lamb: the part of one model tensor a range holds (elements [begin, begin +
// count) of the range). The range's tensors' norms add up over these parts,
// and over the other ranks' parts of the same tensors.
struct TensorPart {
  int tensor;  // index into the trust sums (a model parameter id)
  int64_t begin, count;
};

class Optimizer {
 public:
  // State for `numel` elements in memory (or where `make_store` puts it);
  // `master_weights`: the store's first tensor ("master") holds fp32 weights
  // the updates apply to. `placement`: the memory a resident store's state
  // lives in and the step backend the updates run on (default: the host's).
  Optimizer(const OptimizerConfig &config, int64_t numel, MemoryTracker *tracker,
            bool master_weights = false, const StateStoreMaker &make_store = nullptr,
            StepPlacement placement = {});

  // One update of params[0, numel) from grads at learning rate `lr`.
  void Step(float *params, const float *grads, double lr);
  // The same update in pieces (e.g. gradients converted from 16 bits a piece
  // at a time): BeginStep once, then for pieces that together cover [0,
  // numel) once: AcquireState, Update, ReleaseState.
  void BeginStep();
  Status AcquireState(int64_t begin, int64_t count, StatePiece *piece);
  Status ReleaseState(const StatePiece &piece) { return state_->Release(piece, true); }
  bool fuses() const { return config_.type != OptimizerType::kSGD; }
  // Updates `params` (or, when null, the piece's master weights) from grads,
  // all [piece.count] elements of the piece; `fusion` only when fuses().
  void Update(const StatePiece &piece, float *params, const float *grads, double lr,
              const UpdateFusion &fusion = {});

  // A two-pass step (two_pass()): the pieces' Update in a first pass after
  // BeginStep (the gradients read), the exchange() the caller makes between
  // the ranks, BeginApplyPass, and the pieces' Update again (from the state
  // alone: grads may be null). Both passes write fusion.half_out.
  //   Lamb: the moments, each tensor part's sums of w^2 and u^2 added into
  //     trust_sums() (which the caller sums over the ranks holding other
  //     parts of the same tensors), then the trust ratios and the weights.
  //   OneBitAdam past freeze_step: the momentum, exchanged, then the weights.
  //   ZeroOneAdam: the gradient captured into accumulator() and exchanged,
  //     then the momentum and the weights; or, frozen, a synchronising
  //     step's accumulated local steps exchanged, then applied.
  enum class Exchange { kNone, kTrustSums, kMomentum, kAccumulator };
  Exchange exchange() const;
  bool two_pass() const { return exchange() != Exchange::kNone; }
  // The 1-bit optimizers: whether step `step` (1-based; the one about to
  // begin) all-reduces its gradients (otherwise they stay on their rank),
  // and whether the exchanges' error feedback restarts before it.
  bool ReducesGradients(int64_t step) const;
  bool RestartsExchangeErrors(int64_t step) const {
    return config_.type == OptimizerType::kZeroOneAdam && step == config_.var_freeze_step + 1;
  }
  // OneBitAdam: past freeze_step (the step begun); its momentum pass's
  // exp_avg is what the ranks exchange before the apply pass.
  bool CompressesStep(int64_t step) const {
    return config_.type == OptimizerType::kOneBitAdam && step > config_.freeze_step;
  }
  bool compressing() const { return CompressesStep(steps_); }
  // ZeroOneAdam: the gradient or the accumulated local steps, exchanged in
  // place ([numel], host memory).
  float *accumulator() { return accumulator_.data(); }
  // OneBitLamb: each tensor's frozen values (scaling, averaged trust ratio,
  // last factor), flat, for checkpoints (empty for the others).
  std::vector<float> PerTensorScalars() const;
  Status SetPerTensorScalars(const std::vector<float> &values);
  // OneBitLamb's first compressed step (the one begun): each tensor's
  // momentum scaled towards the model's mean RMS (reduced by `reducers`).
  // Call after BeginStep, before the first pass.
  Status FreezeScalingsIfDue(const TensorReducers &reducers);
  // OneBitLamb past its freeze: after BeginApplyPass a pass over the pieces
  // gathers each tensor's factor inputs (factor_pass() is true), then
  // BeginFinishPass combines them over `reducers` and the pass after it
  // moves the weights.
  bool factor_pass() const { return factor_pass_; }
  Status BeginFinishPass(const TensorReducers &reducers);
  // Lamb: the tensor parts of the range (one tensor until set).
  void SetTensorParts(std::vector<TensorPart> parts, int tensors);
  std::vector<double> &trust_sums() { return trust_sums_; }  // [2 x tensors]: w^2, u^2
  void BeginApplyPass();
  // The trust ratio tensor `t` moved with in the last step (1 before one).
  float trust_ratio(int t) const { return trust_[size_t(t)]; }

  int64_t steps_taken() const { return steps_; }
  // A resume: 0/1 Adam's schedule rebuilt (the kind of the last step taken
  // too), its accumulator restarted.
  void set_steps_taken(int64_t steps);
  // 0/1 Adam: whether the last step was past the variance freeze, which
  // leaves each rank's weights its own (a local step parts them; a
  // synchronisation joins them up to each rank's rounding); the learning
  // rates summed since the last synchronisation (kept with the accumulator
  // in a rank's own state).
  bool ranks_parted() const {
    return config_.type == OptimizerType::kZeroOneAdam && steps_ > 0 &&
           (kind_ == ZeroOneStep::kLocal || kind_ == ZeroOneStep::kSync);
  }
  double *lr_sum() { return &lrs_; }
  const OptimizerConfig &config() const { return config_; }
  bool master_weights() const { return master_; }
  // The store: tensor 0 is "master" when master_weights(), then the
  // optimizer's own tensors (state_names()).
  StateStore &state() { return *state_; }
  const StateStore &state() const { return *state_; }
  // The optimizer's own state tensors, in store order after the master.
  std::vector<std::string> state_names() const;
  size_t first_state_tensor() const { return master_ ? 1 : 0; }
  // The optimizer's own state as resident buffers (tests; empty when the
  // store keeps it elsewhere).
  std::vector<OptimizerStateBuffer> StateBuffers();
  // "AdamW", "Adam", "SGD", "Lamb", "OneBitAdam".
  const char *Name() const;

 private:
  OptimizerConfig config_;
  int64_t numel_;
  bool master_;
  StepPlacement placement_;
  int64_t steps_ = 0;
  std::unique_ptr<StateStore> state_;
  // Lamb.
  void LambUpdate(const StatePiece &piece, float *w, const float *grads,
                  const UpdateFusion &fusion);
  LambHyper LambHyperNow(double lr) const;
  void OneBitAdamUpdate(const AdamRange &range, const AdamHyper &h);
  void ZeroOneAdamUpdate(const StatePiece &piece, const AdamRange &range, const AdamHyper &h);
  // OneBitLamb.
  bool onebit_lamb_compressing() const {
    return config_.type == OptimizerType::kOneBitLamb && steps_ > config_.freeze_step;
  }
  std::vector<cpu::OneBitLambTensor> onebit_lamb_;  // per tensor
  std::vector<cpu::OneBitLambPartial> partials_;    // per tensor, the factor pass's
  std::vector<float> scales_;                       // per tensor, the finish pass's
  bool factor_pass_ = false;
  Buffer<float> m_last_;                            // [numel] the momentum before the step
  // ZeroOneAdam.
  ZeroOnePolicy policy_;
  ZeroOneStep kind_ = ZeroOneStep::kVariance;  // the step begun
  Buffer<float> accumulator_;                  // [numel] kOptimizerState
  double lrs_ = 0;                             // lr summed over the local steps
  std::vector<TensorPart> parts_;              // sorted by begin, disjoint
  std::vector<double> trust_sums_;
  std::vector<float> trust_;
  bool applying_ = false;
  double lr_ = 0;
};

}  // namespace dst
