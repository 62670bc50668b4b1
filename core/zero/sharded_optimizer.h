// The sharded optimizer, the `optimizer` half of ZeRO (gradient
// synchronisation is the other: grad_sync.h). It owns what the step needs
// beyond the reduced gradients:
//   - the Optimizer over this rank's state range, its state (and fp32 master
//     weights) in a StateStore (memory, or NVMe), stepped a piece at a time;
//   - precision: under 16 bits the gradients unscaled (loss scale, group
//     size, predivision) and clipped as they are widened, the updated master
//     weights rounded into the 16-bit parameters; under fp32 the parameters
//     updated in place, or through a mirror of master weights when the state
//     lives outside memory or the parameters are offloaded;
//   - placement: resident, or (on a device) ZeRO-Offload's host state with
//     the gradients streamed down and the weights up, and stage 3's
//     parameter shard on the host or swapped to NVMe;
//   - the norm and clipping of the gradients it steps on, in one call;
//   - rollback: a failed step forgets its pass and restores the parameters
//     from the master weights committed last;
//   - after the step, the parameters every rank needs (stages 1, 2: the
//     updated shards all-gathered).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/common/status.h"
#include "core/config/config.h"
#include "core/optim/optimizer.h"
#include "core/zero/grad_sync.h"
#include "core/zero/host_staging.h"
#include "core/zero/onebit_allreduce.h"
#include "core/zero/update_exchange.h"
#include "core/zero/zero_shards.h"

namespace dst {

class ShardedOptimizer final : public GradObserver {
 public:
  // `shards` must outlive this object. `make_store`: where the state lives
  // (unset: memory); `param_swap` (path set, stage 3): the parameter shard
  // beyond max_in_cpu on NVMe. Attach names the gradients before a step.
  ShardedOptimizer(const Config &config, const ZeroShards *shards,
                   const StateStoreMaker &make_store, ParamSwapOptions param_swap);
  ~ShardedOptimizer() override;
  // The synchronisation whose reduced gradients the step uses (it must
  // outlive this object); it reports to this object where the step reads
  // them from host copies made during the backward.
  void Attach(GradientSync *grads);

  Optimizer &optimizer() { return *optimizer_; }
  const Optimizer &optimizer() const { return *optimizer_; }
  // OneBitAdam's / ZeroOneAdam's compressed exchange (dp > 1, stage 0), else null.
  const OneBitAllReduce *momentum_exchange() const { return onebit_.get(); }
  // gradient_compression's update exchange (target "update", dp > 1), else null.
  const UpdateExchange *update_exchange() const { return updates_.get(); }
  // The 1-bit errors and the update exchange's residual and moments (each
  // rank steps its own optimizer there) as this rank's own state;
  // ResetOwnState zeroes the errors and the residual (the moments are the
  // checkpoint's flat state).
  void AppendOwnState(OwnState *out);
  void ResetOwnState();
  // The parameters the step writes: stage 3's partition (gathered by
  // ParamGathering), or under 16 bits the working copies; else null.
  ParameterPartition *param_partition() const { return params_.get(); }

  // Opens the store, moves swapped parameters to NVMe, writes the initial
  // master weights unless the store holds a previous run's state.
  Status Start();
  Result<std::string> ResumeAt(int64_t step);
  Status StartFresh();

  // A step's gradients begin: the clipping coefficient and the host copies
  // reset. Returns whether they stay local to each rank (1-bit Adam's
  // compressed steps, a compressed update's steps: not reduced).
  bool BeginGradients();
  void SetLossScale(double scale) { loss_scale_ = scale; }
  // From the stored gradient sum to the average the step uses: 1 under fp32
  // (averaged by the synchronisation), 1 / (loss scale x dp x predivision)
  // under 16 bits (each rank's own sum on 1-bit Adam's compressed steps).
  double GradFactor() const;

  // Global L2 norm of the averaged, unscaled gradients: this group's shards
  // summed, leaving out the tensors `excluded` (counted by another group),
  // plus `over_groups`' share; then, when it is finite and max_norm > 0,
  // the gradients the step uses are clipped by max_norm / (norm + 1e-6).
  Result<double> ClipGradients(double max_norm, const std::vector<int> &excluded = {},
                               const NormReducer &over_groups = nullptr);
  // The update of this rank's state range, then the parameters every rank
  // needs. On failure nothing changed (or the error says to load a checkpoint).
  // `reducers` (Lamb, 1-bit LAMB): the other groups' parts of each tensor's
  // values and the other stages' tensors (TensorReducers, optimizer.h).
  Status Step(double lr, const TensorReducers &reducers = {});

  // The master weights hold the parameters checkpoints see (16 bits, or fp32
  // with the parameters offloaded).
  bool MastersAreParams() const { return shards_.wide() || ParamsOffloaded(); }
  // Tensor `id`'s part of the master weights this rank holds, from `in` [numel]
  // (and 0/1 Adam's accumulated local steps over it restarted).
  Status WriteMasters(int id, const float *in);
  // A checkpoint load wrote the weights (the masters when MastersAreParams,
  // else the parameters): every derived copy follows.
  Status WeightsLoaded();

  // GradObserver: the reduced gradients' host copy (on a device with the
  // state on the host, the sums come down during the backward).
  void GradsFinal(int64_t begin, int64_t count) override;
  void GradsScaled(float k) override;
  void GradsChanged() override { grads_on_host_ = false; }
  void BeforeGradsWrite() override;

 private:
  const StepKernels &step() const { return shards_.placement.step(); }
  const ShardInfo &range() const { return shards_.state_range; }
  Fp32Params *fp32() const { return shards_.fp32; }
  bool ParamsOffloaded() const { return !param_swap_.path.empty() || params_on_host_; }
  Status StartParamSwap();
  Result<double> SquaresOverRanks(double local);
  // fp32 weights the optimizer updates in place.
  float *StateParams();
  // The parameter shard's element of state element `begin` (16 bits).
  int64_t ParamIndex(int64_t begin) const {
    return shards_.stage >= 3 ? begin : range().offset + begin;
  }
  uint16_t *HalfParams(int64_t begin);
  Status MasterToParams(int64_t begin, int64_t count, const float *master);
  Status NarrowIntoShard(int64_t at, const float *master, int64_t count);
  Status MastersToParams(int64_t begin, int64_t count, const float *master);
  Status HostMastersToParams(int64_t begin, int64_t count, const float *master);
  Status StateToParams(int64_t begin, int64_t count, const float *master);
  void ParamsToMasters(const StatePiece &piece);
  Status WriteHalfParams(int64_t begin, int64_t n, const uint16_t *host);
  Status SendHalfParams(int64_t begin, int64_t n, const uint16_t *half, uint64_t *sent);
  Status ParamsFromMasters();
  Status ShareParams();
  Status ForEachStatePiece(bool modified, const std::function<Status(const StatePiece &)> &fn);
  Status UpdatePieces(int64_t *touched, const std::function<Status(const StatePiece &)> &update);
  void SetTensorParts();
  Status TwoPassStep(double lr, const TensorReducers &reducers, int64_t *touched);
  Status ExchangeMomentum();
  // The fp32 weights the step moves: the parameters, or the master weights.
  float *SteppedWeights();
  Status ExchangeUpdate(float *weights);
  Status FactorPiece(const StatePiece &piece, double lr);
  Status ApplyPiece(const StatePiece &piece, double lr);
  Status UpdatePiece(const StatePiece &piece, double lr);
  Status UpdateHostPiece(const StatePiece &piece, double lr);
  // ZeRO-Offload's loop on a device: the piece's gradients (`grads`, in
  // device memory, `bytes` each) come down a chunk at a time into the two
  // host staging buffers (chunk i + 1's copy queued before chunk i is
  // updated) and update(part, host_grads, b) runs on each chunk on the host.
  template <typename Update>
  Status StreamGradsDown(const StatePiece &piece, const void *grads, size_t bytes, Update update);
  Status RollBack(int64_t touched, Status failure);

  const ZeroShards &shards_;
  GradientSync *grads_ = nullptr;
  StorageOps ops_;
  ParamSwapOptions param_swap_;
  bool mirror_ = false;          // fp32 with master weights elsewhere (or swapped parameters)
  bool host_state_ = false;      // on a device: the state on the host (offload_optimizer)
  bool params_on_host_ = false;  // on a device at stage 3: the parameter shard too
  int64_t chunk_elements_;       // elements one chunk of the 16-bit / offloaded update covers
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<ParameterPartition> params_;  // stage 3; 16 bits: also 0-2 (a group of one)
  std::unique_ptr<OneBitAllReduce> onebit_;     // OneBitAdam / ZeroOneAdam at stage 0, dp > 1
  std::unique_ptr<UpdateExchange> updates_;     // gradient_compression.target "update"
  bool local_grads_ = false;                    // this step's gradients are not reduced
  // host_state_: the update's transfer buffers, two each way (page-locked
  // with offload_optimizer.pin_memory).
  HostStaging down_[2], up_[2];
  // host_state_ with reductions (stages 2, 3; 0, 1 on more than one rank):
  // the state range's gradients, each owned piece copied down once it holds
  // the step's sum (GradsFinal; grads_down_ the last copy's mark). The step
  // reads them there unless something changed the device's copy since
  // (grads_on_host_ false: the chunks come down as before); fp32's averaging
  // and clipping, applied on the device after the copies, are replayed on
  // them in the same order (host_scalings_).
  HostStaging host_grads_;
  uint64_t grads_down_ = 0;
  bool grads_on_host_ = false;
  std::vector<float> host_scalings_;
  Buffer<float> chunk_;  // [chunk_elements_] 16 bits: gradients widened for the update
  double loss_scale_ = 1, clip_coef_ = 1;  // 16 bits: applied in the step
};

}  // namespace dst
