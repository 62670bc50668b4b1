// Data parallelism with ZeRO stages 0-3: one sharding engine for every
// precision. How parameters and gradients are stored is the only thing
// precision changes (storage.h): fp32, or 16 bits with fp32 master weights
// in the optimizer's state store (the ZeRO paper's 2 + 2 + K bytes).
//
//   stage   parameters              gradients             optimizer state (+ masters)
//     0     all                     all, bucketed         all
//     1     all                     all, bucketed         shard
//     2     all                     shard (per layer)     shard
//     3     shard (+ persistent)    shard (per layer)     shard
//
// The parts, each written once over the storage type:
//   - BucketReducer (stages 0, 1): the full gradient buffer reduced in
//     buckets from the top, launched during the step's last backward with
//     overlap_comm (all-reduce at 0, reduce to the owner at 1).
//   - GradientPartition (stages 2, 3): each layer's gradients staged and
//     reduced to their owners after its backward (two staging buffers with
//     overlap_comm); tensors several layers write (the tied wte) reduced once,
//     after the last writer.
//   - ParameterPartition (stage 3): each layer's parameters gathered before
//     it runs, the next one prefetched, small tensors (numel <=
//     stage3_param_persistence_threshold) kept whole on every rank.
//   - The Optimizer over this rank's state range, its state (and masters) in
//     a StateStore, stepped a piece at a time.
// The layers compute in fp32 on the CPU: with 16-bit storage a layer's
// parameters are widened into a working buffer before it runs (the
// ParameterPartition over a group of one at stages 0-2) and its fp32
// gradients staged and rounded as they are added into 16-bit storage (the
// GradientPartition over a group of one at stages 0, 1).
//
// With fp16/bf16_override_modules the listed layer types' tensors stay fp32
// (Fp32Params, whole on every rank) and the partitions leave them out.
//
// DataParallel is the model's LayerHooks: the engine passes it to
// Model::Forward/Backward, which stop at the first hook that fails.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "core/optim/optimizer.h"
#include "core/runtime/memory.h"
#include "core/zero/bucket_reducer.h"
#include "core/zero/fp32_params.h"
#include "core/zero/grad_partition.h"
#include "core/zero/host_staging.h"
#include "core/zero/onebit_allreduce.h"
#include "core/zero/parallelism.h"
#include "core/zero/param_partition.h"
#include "core/zero/partition_plan.h"
#include "core/zero/shard_layout.h"
#include "core/zero/storage.h"

namespace dst {

// The flat fp32 buffers the model's ParamStore allocates for a ZeRO stage and
// a training dtype (the rest lives in DataParallel): values at stages 0-2
// and gradients at 0-1 under fp32, none under 16 bits.
ParamStoreOptions StoreOptionsForStage(int stage, int64_t dp_size,
                                       DType precision = DType::kFloat32);

class DataParallel final : public DataParallelism {
 public:
  // `model` must have been built with StoreOptionsForStage(config.zero.stage,
  // dp->size(), config.precision()); it and `dp` must outlive this object.
  // `make_store`: where the optimizer's state lives (unset: memory). A store
  // outside memory also holds fp32 master weights under fp32 training: they
  // mirror the parameters, so that a failed step can restore them.
  // `param_swap` (path set): ZeRO 3's parameter shard beyond max_in_cpu
  // elements lives on NVMe; fp32 training then keeps master weights too.
  // `placement`: where the model's buffers live (the memory `model` was
  // built with) and the step backend that computes on them; a device
  // placement runs fp32 at stages 0 and 1 in memory (the engine checks the
  // layout first: CheckDevicePlacement), everything else on the host.
  DataParallel(const Config &config, Model<float> *model, Communicator *dp, MemoryTracker *tracker,
               const StateStoreMaker &make_store = nullptr, ParamSwapOptions param_swap = {},
               StepPlacement placement = {});
  ~DataParallel() override;
  // Opens the optimizer's store, writes the initial master weights and
  // (offload_param nvme) the swapped parameters; once, before the first step.
  Status Start() override;
  std::vector<int64_t> ResumableSteps() const override {
    return optimizer_->state().ResumableSteps();
  }
  Result<std::string> ResumeAt(int64_t step) override;
  Status StartFresh() override;
  bool KeepsCommitNotes() const override {
    return std::string_view(optimizer_->state().kind()) != "resident";
  }
  void SetCommitNote(std::string note) override {
    optimizer_->state().SetCommitNote(std::move(note));
  }
  // The parameter swap file, or null (parameters in memory).
  const ParamSwap *param_swap() const { return params_ ? params_->swap() : nullptr; }
  const ParameterPartition *param_partition() const { return params_.get(); }
  // OneBitAdam's / ZeroOneAdam's compressed exchange (dp > 1), else null.
  const OneBitAllReduce *momentum_exchange() const { return onebit_.get(); }
  // What gradient_compression sent so far (dp > 1: ZeRO 0/1's compressed
  // all-gathers, ZeRO 2/3's sparse reduce-scatter), else null.
  const CompressionTotals *compression_totals() const;

  const ShardLayout &layout() const { return layout_; }
  ShardInfo my_shard() const { return layout_.Shard(dp_->rank()); }
  int stage() const override { return stage_; }
  StorageType storage() const { return storage_; }
  Optimizer &optimizer() override { return *optimizer_; }
  Communicator &comm() { return *dp_; }
  const std::vector<GradBucket> &buckets() const;
  const PartitionPlan &plan() const { return plan_; }
  // The tensors kept in fp32 under 16-bit training (override_modules), or null.
  const Fp32Params *fp32_params() const { return fp32_.get(); }

  Status ZeroGradients() override;
  void BeginBackward(bool last, bool last_of_chunk) override {
    launch_buckets_ = overlap_ && last;
    if (grads_) grads_->SetFinalPass(last_of_chunk);
  }
  void SetLossScale(double scale) override { loss_scale_ = scale; }
  double GradPreScale() const override { return pre_scale_; }
  Status BeforeForward(size_t layer) override;
  Status BeforeBackward(size_t layer) override;
  Status AfterBackward(size_t layer) override;
  Status BeforeInputGradient(size_t layer) override;
  Status BeforeWeightGradient(size_t layer) override;
  std::optional<Half> activation_half() const override;

  // Launches what is left, waits for everything, and (fp32) averages: the
  // whole buffer (stage 0) or this rank's shard (stages 1-3).
  Status FinishReduction() override;
  // Global L2 norm of the averaged, unscaled gradients (over shards, 1-3).
  Result<double> GradNorm() override;
  Result<double> GradSquaredNorm(const std::vector<int> &excluded) override;
  Status ReadStoredGradient(int id, float *out) override;
  Status AddStoredGradient(int id, const float *in) override;
  void ScaleGradients(float k) override;
  // Optimizer update of this rank's state range, then the parameters every
  // rank needs: all-gathered (stages 1, 2) or refreshed persistent tensors (3).
  Status Step(double lr) override;
  // After a forward_backward without a step: the full averaged gradient
  // readable (stage 1: all-gathered in place; 2, 3: into a temporary
  // full-size buffer charged to gradients, freed when the next step begins).
  Status GatherGradients() override;
  Result<double> Average(double value) override { return AverageOverGroup(*dp_, value); }

  // Whole tensors, whatever the stage. ReadParam is collective at stage 3
  // with dp > 1 unless the tensor is persistent; WriteParam expects the same
  // data on every rank. Under 16 bits ReadParam returns the 16-bit working
  // weights widened (the master weights are in the optimizer's state).
  Status ReadParam(int id, float *out) override;
  Status WriteParam(int id, const float *in) override;
  // Stages 1-3: an error unless GatherGradients ran since the step began.
  Status ReadGrad(int id, float *out) const override;
  // On a device both return a host copy of the parameters, downloaded at the
  // call (checkpoints read it; a load writes it, then ParamsChanged uploads it).
  float *FullParams() override;
  float *LocalParams(ShardInfo *range) override;
  ShardInfo StateRange() const override { return state_range_; }
  Status ParamsChanged() override;

 private:
  bool Wide() const { return storage_ != StorageType::kFp32; }
  // The part of tensor `id` this rank's state range holds: [begin, end) in
  // flat offsets (empty when begin == end).
  ShardInfo StatePartOf(int id) const;
  const StepKernels &step() const { return placement_.step(); }
  // Copies n floats between the host and the placement's memory.
  void ToHost(const float *src, int64_t n, float *host) const;
  void FromHost(const float *host, int64_t n, float *dst) const;
  // The parameters checkpoints see: the master weights (16 bits, or fp32
  // with a mirror), else the fp32 parameters; HeldParams: the flat range of
  // them this rank holds.
  bool MastersAreParams() const { return Wide() || ParamsOffloaded(); }
  ShardInfo HeldParams() const;
  // Those parameters downloaded into host_params_ (a device placement).
  float *HostParams();
  // Sum of squares of n gradients in the storage type (fp32: the step backend).
  double SquaresOf(const void *grads, int64_t n) const;
  // The full gradient buffer of stages 0, 1 (storage type).
  void *FullGrads();
  // This rank's gradients over the state range (storage type).
  void *StateGrads();
  // fp32 weights the optimizer updates in place (fp32 storage).
  float *StateParams();
  // From the stored gradient sum to the average the step uses: 1 under fp32
  // (averaged in place by FinishReduction), 1 / (loss scale x dp) under 16 bits.
  // 1-bit Adam's compressed steps keep each rank's own sum (no dp).
  double GradFactor() const {
    const double ranks = local_grads_ ? 1.0 : double(dp_->size());
    return Wide() ? 1.0 / (loss_scale_ * ranks * pre_scale_) : 1.0;
  }
  Result<double> SquaresOverRanks(double local);
  Status ExchangeMomentum();
  // 16 bits: the parameters of state element `begin`.
  uint16_t *HalfParams(int64_t begin);
  // The parameter shard's element of state element `begin` (16 bits).
  int64_t ParamIndex(int64_t begin) const {
    return stage_ >= 3 ? begin : state_range_.offset + begin;
  }
  // 16 bits: the updated master weights into the 16-bit parameters.
  Status MasterToParams(int64_t begin, int64_t count, const float *master);
  // Host master weights [count] rounded into the shard from shard element
  // `at`, a chunk at a time through a host buffer (swapped or host-held shards).
  Status NarrowIntoShard(int64_t at, const float *master, int64_t count);
  // The master weights into the parameters (16 bits: rounded; fp32 with a
  // mirror: copied) over state elements [begin, begin + count).
  Status MastersToParams(int64_t begin, int64_t count, const float *master);
  // offload_param: the shard beyond max_in_cpu on NVMe, or (on a device) the
  // shard in host memory; the parameters follow the master weights (fp32 too).
  bool ParamsOffloaded() const { return !param_swap_.path.empty() || params_on_host_; }
  // Opens the parameter swap file and moves the shard beyond max_in_cpu there.
  Status StartParamSwap();
  // MastersToParams from master weights in host memory (a rollback's).
  Status HostMastersToParams(int64_t begin, int64_t count, const float *master);
  // MastersToParams from the state store's masters, wherever they live.
  Status StateToParams(int64_t begin, int64_t count, const float *master);
  // fp32 with a mirror: the parameters into the piece's master weights.
  void ParamsToMasters(const StatePiece &piece);
  // 16 bits: host `host` [n] into the parameters of state elements [begin, begin + n).
  Status WriteHalfParams(int64_t begin, int64_t n, const uint16_t *host);
  // UpdatePiece under 16 bits with the state on the host.
  Status UpdateHostPiece(const StatePiece &piece, double lr);
  // ZeRO-Offload's loop on a device: the piece's gradients (`grads`, in
  // device memory, `bytes` each) come down a chunk at a time into the two
  // host staging buffers — chunk i + 1's copy queued before chunk i is
  // updated — and update(part, host_grads, b) runs on each chunk on the host
  // (b: the staging pair it may use).
  template <typename Update>
  Status StreamGradsDown(const StatePiece &piece, const void *grads, size_t bytes, Update update);
  // The shard's flat range [begin, begin + count) holds the step's sum: its
  // copy down into host_grads_ is queued on the stream.
  void GradsFinal(int64_t begin, int64_t count);
  // The 16-bit copy of state elements [begin, begin + n) up from the host
  // staging buffer `half`: queued (*sent: its copy mark), or written now.
  Status SendHalfParams(int64_t begin, int64_t n, const uint16_t *half, uint64_t *sent);
  // The master weights into every parameter (a checkpoint loaded them, or a resume).
  Status ParamsFromMasters();
  // `update` over the state range, a store piece at a time, as one pass of
  // the store; `touched`: the state elements the update reached.
  Status UpdatePieces(int64_t *touched, const std::function<Status(const StatePiece &)> &update);
  // Lamb: the tensor parts of the state range, and its two-pass step.
  void SetTensorParts();
  Status TwoPassStep(double lr, int64_t *touched);
  // The second pass on a piece: the weights from the state alone.
  Status ApplyPiece(const StatePiece &piece, double lr);
  Status UpdatePiece(const StatePiece &piece, double lr);
  // A failed pass: the store forgets it, the parameters of [0, touched)
  // come back from the master weights it committed last.
  Status RollBack(int64_t touched, Status failure);
  // Calls `fn` on every piece of the state range in one pass of the store;
  // `modified`: the pieces are written back.
  Status ForEachStatePiece(bool modified, const std::function<Status(const StatePiece &)> &fn);
  // Stages 1, 2: every rank's updated shard of the parameters to all; stage
  // 3 and 16-bit working copies: forget what is staged.
  Status ShareParams();

  int stage_;
  StorageType storage_, wire_;
  Communicator *dp_;
  Model<float> *model_;
  MemoryTracker *tracker_;
  ShardLayout layout_;
  ShardInfo state_range_;
  bool overlap_ = false, launch_buckets_ = false;
  bool mirror_ =
      false;  // fp32 training with master weights in a store elsewhere (or swapped params)
  bool host_state_ = false;      // on a device: the optimizer state on the host (offload_optimizer)
  bool params_on_host_ = false;  // on a device at stage 3: the parameter shard too (offload_param)
  ParamSwapOptions param_swap_;
  StepPlacement placement_;
  StorageOps ops_;          // over the placement
  int64_t chunk_elements_;  // elements one chunk of the 16-bit / offloaded update covers
  // host_state_: the offloaded update's transfer buffers, two each way
  // (page-locked with offload_optimizer.pin_memory).
  HostStaging down_[2], up_[2];
  // host_state_ (stages 2, 3; 0, 1 on more than one rank): the state range's
  // gradients (storage type), each owned piece copied down during the
  // backward once it holds the step's reduced sum (GradsFinal; grads_down_
  // the last copy's mark). The step
  // reads them there unless something changed the device's copy since (a
  // tied weight's sum: grads_on_host_ false, the chunks come down as before);
  // fp32's averaging and clipping, applied on the device after the copies,
  // are replayed on them in the same order (host_scalings_).
  HostStaging host_grads_;
  uint64_t grads_down_ = 0;
  bool grads_on_host_ = false;
  std::vector<float> host_scalings_;
  std::unique_ptr<Communicator> local_;  // a group of one: 16-bit working copies at stages 0-2
  PartitionPlan plan_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<BucketReducer> buckets_;      // stages 0, 1
  std::unique_ptr<OneBitAllReduce> onebit_;     // OneBitAdam / ZeroOneAdam at stage 0, dp > 1
  bool local_grads_ = false;                    // this step's gradients are not reduced
  int64_t compression_warmup_ = 0;              // gradient_compression's uncompressed steps
  std::unique_ptr<GradientPartition> grads_;    // stages 2, 3; 16 bits: also 0, 1 (local)
  std::unique_ptr<ParameterPartition> params_;  // stage 3; 16 bits: also 0-2 (local)
  std::unique_ptr<Fp32Params> fp32_;  // 16 bits with override_modules: tensors kept in fp32
  FlatBuffer gathered_grads_;         // [padded] stages 2, 3 after GatherGradients
  Buffer<float> host_params_;  // [padded] on a device: the host copy checkpoints use (offload)
  Buffer<float> chunk_;        // [kChunk] 16 bits: gradients widened for the update
  bool grads_gathered_ = false;
  double loss_scale_ = 1, clip_coef_ = 1;  // 16 bits: applied in the step
  double pre_scale_ = 1;                   // GradPreScale
};

}  // namespace dst
