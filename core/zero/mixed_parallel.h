// Mixed-precision (fp16 / bf16) data parallelism with ZeRO stages 0-3, the
// ZeRO paper's "2 + 2 + K" layout: 16-bit parameters and gradients, and fp32
// master weights with the optimizer state (K = 12 bytes per parameter for
// Adam: master, exp_avg, exp_avg_sq) sharded from stage 1.
//
//   stage   16-bit params   16-bit grads   master + optimizer state
//     0      [padded]        [padded]         [padded]
//     1      [padded]        [padded]         [shard]
//     2      [padded]        [shard]          [shard]
//     3      [shard]         [shard]          [shard]
//
// On the CPU the layers compute in fp32: before a layer's forward and
// backward its parameters are widened from 16 bits into an fp32 working
// buffer sized for the largest layer (gathered from their owners first at
// stage 3), its gradients accumulate in an fp32 working buffer, and after
// its backward they are added into the 16-bit gradients (stages 0, 1) or
// reduced to their owners and added there (stages 2, 3). Activations are
// rounded to 16 bits at every layer boundary (activation_rounding). The
// step widens the 16-bit gradients a chunk at a time, unscales them (loss
// scale x dp size), clips, updates the fp32 master weights, and rounds them
// back into the 16-bit parameters (all-gathered at stages 1, 2).
//
// Gradients are reduced in communication_data_type: fp32 (widened for the
// wire, summed in fp32, rounded once) or the training dtype (summed in 16
// bits). With ZeRO 0/1 the reduction runs after the last micro-batch's
// backward; with 2/3 after each layer's backward, without overlap.
// Differences from the fp32 path (DataParallel): stage 3 partitions every
// tensor (stage3_param_persistence_threshold is not applied) and tied
// weights are reduced once per writer (the GPT's wte twice).
#pragma once

#include <memory>
#include <vector>

#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/precision/half_ops.h"
#include "core/runtime/memory.h"
#include "core/zero/parallelism.h"
#include "core/zero/partition_plan.h"

namespace dst {

// The flat buffers the model's ParamStore allocates under mixed precision:
// none (the 16-bit storage and the fp32 working buffers live here).
ParamStoreOptions StoreOptionsForMixedPrecision(int64_t dp_size);

class MixedPrecisionParallel final : public DataParallelism {
 public:
  // `model` must have been built with StoreOptionsForMixedPrecision; it and
  // `dp` must outlive this object.
  MixedPrecisionParallel(const Config &config, Model<float> *model, Communicator *dp,
                         MemoryTracker *tracker);
  ~MixedPrecisionParallel() override;

  int stage() const override { return stage_; }
  Optimizer &optimizer() override { return *optimizer_; }
  Half half() const { return half_; }

  Status BeforeForward(size_t layer) override;
  Status BeforeBackward(size_t layer) override;
  Status AfterBackward(size_t layer) override;
  RoundFn activation_rounding() const override;

  Status ZeroGradients() override;
  void BeginBackward(bool) override {}
  void SetLossScale(double scale) override { loss_scale_ = scale; }
  Status FinishReduction() override;
  Result<double> GradNorm() override;
  void ScaleGradients(float k) override { clip_coef_ *= double(k); }
  Status Step(double lr) override;
  Status GatherGradients() override;
  Result<double> Average(double value) override { return AverageOverGroup(*dp_, value); }

  Status ReadParam(int id, float *out) override;
  Status WriteParam(int id, const float *in) override;
  Status ReadGrad(int id, float *out) const override;

  float *FullParams() override;
  float *LocalParams(ShardInfo *range) override;
  ShardInfo StateRange() const override { return state_range_; }
  Status ParamsChanged() override;

 private:
  // Widens (stage 3: gathers, then widens) `layer`'s parameters into the
  // working buffer and points the layer's tensors at it.
  Status Acquire(size_t layer);
  // Gathers the 16-bit values of flat [begin, end) from their owners (stage
  // 3) into out16[0, end - begin).
  void GatherPieces(int64_t begin, int64_t end, uint16_t *out16,
                    std::vector<std::unique_ptr<Work>> *works);
  // Stage 2/3: reduces the layer's working gradients to their owners and
  // adds the owned pieces into the 16-bit gradient shard.
  Status ReduceLayerGradients(const StagingLayout &layout);
  // Stage 0/1: the 16-bit gradients of [begin, end), summed over ranks (to
  // `root`, or everywhere when root < 0) in the communication dtype.
  Status ReduceRange(int64_t begin, int64_t end, int64_t root);
  // 1 / (loss scale x dp size): from summed scaled gradients to the average.
  double Unscale() const { return 1.0 / (loss_scale_ * double(dp_->size())); }
  // The 16-bit parameters <- the master weights of the state range (rounded).
  void MasterToHalf();
  // Stages 1, 2: every rank's updated shard of the 16-bit parameters to all.
  Status ShareHalfParams();

  int stage_;
  Half half_;
  bool reduce_in_half_;  // communication_data_type is the training dtype
  Communicator *dp_;
  Model<float> *model_;
  MemoryTracker *tracker_;
  ShardLayout layout_;
  ShardInfo params_range_, grads_range_, state_range_;  // what p16_, g16_, master_ cover
  int64_t bucket_elements_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<StagingLayout> layers_;  // per layer: every tensor it reads or writes, packed

  Buffer<uint16_t> p16_;         // [params_range.size] kParameters
  Buffer<uint16_t> g16_;         // [grads_range.size] kGradients
  Buffer<float> master_;         // [state_range.size] kOptimizerState
  Buffer<float> work_params_;    // [largest layer] kCommunication: fp32 parameters in use
  Buffer<float> work_grads_;     // [largest layer] kCommunication: fp32 gradients being written
  Buffer<uint16_t> wire16_;      // [largest layer or bucket] kCommunication: 16-bit staging
  Buffer<float> wire32_;         // [bucket] kCommunication: stage 0/1 fp32 reduction
  Buffer<uint16_t> gathered16_;  // [padded] kGradients, after GatherGradients (stages 2, 3)

  int64_t staged_layer_ = -1;  // layer whose parameters are in work_params_
  double loss_scale_ = 1, clip_coef_ = 1;
  bool grads_gathered_ = false;
};

}  // namespace dst
