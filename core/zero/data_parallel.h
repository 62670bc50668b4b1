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
// DataParallel composes the two halves, in Megatron-Core's split:
//   - gradient synchronisation (grad_sync.h), one strategy per stage chosen
//     once: buckets (0, 1) or partitioned gradients (2, 3);
//   - parameter gathering (param_gathering.h) at stage 3, and for 16-bit
//     working copies at 0-2;
//   - the sharded optimizer (sharded_optimizer.h): master weights,
//     precision, placement (resident, host, NVMe), clipping, rollback.
// The synchronisation and the gathering are the model's layer hooks (the
// engine passes this object to Model::Forward/Backward, which stop at the
// first hook that fails). What stays here: the partition plan the halves
// share, and whole-tensor access (reads, writes, the weights checkpoints
// see).
//
// The layers compute in fp32 on the CPU: with 16-bit storage a layer's
// parameters are widened into a working buffer before it runs and its fp32
// gradients staged and rounded as they are added into 16-bit storage. With
// fp16/bf16_override_modules the listed layer types' tensors stay fp32
// (Fp32Params, whole on every rank) and the partitions leave them out.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "core/optim/optimizer.h"
#include "core/runtime/memory.h"
#include "core/zero/fp32_params.h"
#include "core/zero/grad_sync.h"
#include "core/zero/parallelism.h"
#include "core/zero/param_gathering.h"
#include "core/zero/partition_plan.h"
#include "core/zero/shard_layout.h"
#include "core/zero/sharded_optimizer.h"
#include "core/zero/zero_shards.h"

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
  Status Start() override { return optimizer_->Start(); }
  std::vector<int64_t> ResumableSteps() const override {
    return optimizer().state().ResumableSteps();
  }
  Result<std::string> ResumeAt(int64_t step) override { return optimizer_->ResumeAt(step); }
  Status StartFresh() override { return optimizer_->StartFresh(); }
  bool KeepsCommitNotes() const override {
    return std::string_view(optimizer().state().kind()) != "resident";
  }
  void SetCommitNote(std::string note) override {
    optimizer_->optimizer().state().SetCommitNote(std::move(note));
  }
  // The parameter swap file, or null (parameters in memory).
  const ParamSwap *param_swap() const { return params() ? params()->swap() : nullptr; }
  const ParameterPartition *param_partition() const { return params(); }
  // OneBitAdam's / ZeroOneAdam's compressed exchange (dp > 1), else null.
  const OneBitAllReduce *momentum_exchange() const { return optimizer_->momentum_exchange(); }
  // What gradient_compression sent so far (dp > 1: ZeRO 0/1's compressed
  // all-gathers, ZeRO 2/3's sparse reduce-scatter, or the updates'
  // all-gathers with target "update"), else null.
  const CompressionTotals *compression_totals() const {
    if (const UpdateExchange *u = optimizer_->update_exchange()) return &u->totals();
    return sync_->compression_totals();
  }

  const ShardLayout &layout() const { return shards_.layout; }
  ShardInfo my_shard() const { return shards_.my_shard(); }
  int stage() const override { return shards_.stage; }
  StorageType storage() const { return shards_.storage; }
  Optimizer &optimizer() override { return optimizer_->optimizer(); }
  const Optimizer &optimizer() const { return optimizer_->optimizer(); }
  Communicator &comm() { return *shards_.dp; }
  const std::vector<GradBucket> &buckets() const { return sync_->buckets(); }
  const PartitionPlan &plan() const { return plan_; }
  // The tensors kept in fp32 under 16-bit training (override_modules), or null.
  const Fp32Params *fp32_params() const { return fp32_.get(); }

  Status ZeroGradients() override;
  void BeginBackward(bool last, bool last_of_chunk) override {
    sync_->BeginBackward(last, last_of_chunk);
  }
  void SetLossScale(double scale) override { optimizer_->SetLossScale(scale); }
  double GradPreScale() const override { return shards_.pre_scale; }
  // The layer hooks, in order: the parameters gathered, then the gradients
  // staged and reduced.
  Status BeforeForward(size_t layer) override;
  Status BeforeBackward(size_t layer) override;
  Status AfterBackward(size_t layer) override;
  Status BeforeInputGradient(size_t layer) override;
  Status BeforeWeightGradient(size_t layer) override;
  std::optional<Half> activation_half() const override;

  // Launches what is left, waits for everything, and (fp32) averages: the
  // whole buffer (stage 0) or this rank's shard (stages 1-3).
  Status FinishReduction() override { return sync_->Finish(); }
  Result<double> ClipGradients(double max_norm, const std::vector<int> &excluded = {},
                               const NormReducer &over_groups = nullptr) override {
    return optimizer_->ClipGradients(max_norm, excluded, over_groups);
  }
  Status ReadStoredGradient(int id, float *out) override { return sync_->ReadStored(id, out); }
  Status AddStoredGradient(int id, const float *in) override { return sync_->AddStored(id, in); }
  // Optimizer update of this rank's state range, then the parameters every
  // rank needs: all-gathered (stages 1, 2) or refreshed persistent tensors (3).
  Status Step(double lr) override { return optimizer_->Step(lr, reducers_); }
  // After a forward_backward without a step: the full averaged gradient
  // readable (stage 1: all-gathered in place; 2, 3: into a temporary
  // full-size buffer charged to gradients, freed when the next step begins).
  Status GatherGradients() override { return sync_->Gather(); }
  Result<double> Average(double value) override { return AverageOverGroup(*shards_.dp, value); }

  // Whole tensors, whatever the stage. ReadParam is collective at stage 3
  // with dp > 1 unless the tensor is persistent; WriteParam expects the same
  // data on every rank. Under 16 bits ReadParam returns the 16-bit working
  // weights widened (the master weights are in the optimizer's state).
  Status ReadParam(int id, float *out) override;
  Status WriteParam(int id, const float *in) override;
  // Stages 1-3: an error unless GatherGradients ran since the step began.
  Status ReadGrad(int id, float *out) const override {
    return sync_->ReadGrad(id, optimizer_->GradFactor(), out);
  }
  // On a device both return a host copy of the parameters, downloaded at the
  // call (checkpoints read it; a load writes it, then ParamsChanged uploads it).
  float *FullParams() override;
  float *LocalParams(ShardInfo *range) override;
  ShardInfo StateRange() const override { return shards_.state_range; }
  Status ParamsChanged() override;
  OwnState OwnStateBuffers() override;
  void ResetOwnState() override {
    sync_->ResetOwnState();
    optimizer_->ResetOwnState();
  }

 private:
  ParameterPartition *params() const { return optimizer_->param_partition(); }
  // Copies n floats between the host and the placement's memory.
  void ToHost(const float *src, int64_t n, float *host) const;
  void FromHost(const float *host, int64_t n, float *dst) const;
  // The flat range of the weights checkpoints see that this rank holds.
  ShardInfo HeldParams() const;
  // Those weights downloaded into host_params_ (a device placement).
  float *HostParams();

  ZeroShards shards_;
  StorageOps ops_;                       // over the placement
  std::unique_ptr<Communicator> local_;  // a group of one: 16-bit working copies at stages 0-2
  PartitionPlan plan_;
  std::unique_ptr<Fp32Params> fp32_;  // 16 bits with override_modules: tensors kept in fp32
  std::unique_ptr<ShardedOptimizer> optimizer_;
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<ParamGathering> gathering_;  // when there is a parameter partition
  std::vector<LayerHooks *> hooks_;            // gathering_, sync_
  Buffer<float> host_params_;  // [padded] on a device: the host copy checkpoints use (offload)
};

}  // namespace dst
