// What the engine needs from its data-parallel layer, whatever the precision:
// gradient reduction, the (possibly sharded) optimizer step, whole-tensor
// access and the weights a checkpoint saves. DataParallel (data_parallel.h)
// implements it for every ZeRO stage and precision; the interface is the
// seam the executor, the checkpoint code and tests use. It is also the
// model's LayerHooks.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "core/comm/communicator.h"
#include "core/common/status.h"
#include "core/model/model.h"
#include "core/optim/optimizer.h"
#include "core/zero/own_state.h"
#include "core/zero/shard_layout.h"

namespace dst {

class DataParallelism : public LayerHooks {
 public:
  ~DataParallelism() override = default;

  virtual int stage() const = 0;
  virtual Optimizer &optimizer() = 0;
  // Once, before the first step: the optimizer's store opened (a swap file
  // created) and the master weights written — unless the store holds a
  // previous run's state (ResumableSteps not empty): then ResumeAt or
  // StartFresh follows.
  virtual Status Start() = 0;
  // Crash resume from a store that outlives the process (the optimizer's
  // NVMe tier): the steps it can resume at (newest first), resuming at one
  // (state, master weights and parameters as committed then; collective
  // over the dp group; returns the engine's note committed with it), or
  // starting afresh after all. SetCommitNote: the engine's state after the
  // step about to be taken, committed with it.
  virtual std::vector<int64_t> ResumableSteps() const = 0;
  virtual Result<std::string> ResumeAt(int64_t step) = 0;
  virtual Status StartFresh() = 0;
  virtual bool KeepsCommitNotes() const = 0;
  virtual void SetCommitNote(std::string note) = 0;

  // A step begins: gradients are zero, nothing is in flight.
  virtual Status ZeroGradients() = 0;
  // A micro-batch's backward follows; `last` marks the step's last backward
  // (the program says which: Instruction::last_backward), during which
  // reductions may launch as layers finish (overlap_comm); `last_of_chunk`
  // the last backward of its model chunk (Instruction::last_of_chunk): the
  // chunk's layers will not change their gradients again this step.
  virtual void BeginBackward(bool last, bool last_of_chunk) = 0;
  // The loss was multiplied by `scale` before backward (fp16 loss scaling):
  // gradients are divided by it before they are used. 1 unless fp16.
  virtual void SetLossScale(double scale) { (void)scale; }
  // What the backward multiplies each rank's gradients by before they are
  // reduced (prescale_gradients: 1 / dp size; else 1 / gradient_predivide_factor);
  // the reduction's result is then multiplied by 1 / (dp size x this).
  virtual double GradPreScale() const { return 1.0; }

  // Lamb's and 1-bit LAMB's per-tensor values pass through `reducers` before
  // the weights move (TensorReducers, optimizer.h).
  void SetTensorReducers(TensorReducers reducers) { reducers_ = std::move(reducers); }

  // Launches what is left of the reduction and waits for it.
  virtual Status FinishReduction() = 0;
  // The global L2 norm of the averaged (unscaled) gradients, not finite when
  // a gradient overflowed on any rank: this group's shards summed, leaving
  // out the tensors `excluded` (a tied weight's second copy, the tensors
  // every tp rank holds whole, where another rank counts them), plus
  // `over_groups`' share. When it is finite and max_norm > 0, the gradients
  // the step uses are clipped by max_norm / (norm + 1e-6) in the same call.
  virtual Result<double> ClipGradients(double max_norm, const std::vector<int> &excluded = {},
                                       const NormReducer &over_groups = nullptr) = 0;

  // After FinishReduction, tensor `id`'s gradient as the group stores it
  // (widened to fp32; under 16 bits still scaled by the loss scale and the
  // group size), whole on every rank (collective over the group), and
  // adding to it (each rank adds to the part it holds): how a pipeline sums
  // the two stages' copies of a tied weight.
  // `out` / `in` [numel] are in the memory the model's buffers live in.
  virtual Status ReadStoredGradient(int id, float *out) = 0;
  virtual Status AddStoredGradient(int id, const float *in) = 0;
  // Optimizer update of this rank's part, then the parameters every rank needs.
  virtual Status Step(double lr) = 0;
  // After a forward_backward without a step: makes full gradients readable.
  virtual Status GatherGradients() = 0;
  // Mean of a per-rank scalar across the group.
  virtual Result<double> Average(double value) = 0;

  // Whole tensors as fp32 (see DataParallel for the collective rules).
  virtual Status ReadParam(int id, float *out) = 0;
  virtual Status WriteParam(int id, const float *in) = 0;
  virtual Status ReadGrad(int id, float *out) const = 0;

  // The authoritative fp32 weights (the master weights under mixed
  // precision) over the whole padded buffer when this rank holds them all,
  // else null.
  virtual float *FullParams() = 0;
  // The authoritative fp32 weights this rank holds and their flat range;
  // null when they live in the optimizer's store outside memory (its tensor
  // 0, the master weights, read and written through the store).
  virtual float *LocalParams(ShardInfo *range) = 0;
  // The flat range this rank's optimizer state covers.
  virtual ShardInfo StateRange() const = 0;
  // The weights were written through FullParams/LocalParams (a checkpoint
  // load): every derived copy is refreshed.
  virtual Status ParamsChanged() = 0;
  // This rank's own state (own_state.h: compression residuals, 1-bit
  // errors, update compression's moments), what a checkpoint saves per rank;
  // ResetOwnState starts it afresh, as a load from another layout does.
  virtual OwnState OwnStateBuffers() { return {}; }
  virtual void ResetOwnState() {}

 protected:
  TensorReducers reducers_;
};

// Mean of a per-rank scalar over `group` (the value itself on one rank).
inline Result<double> AverageOverGroup(Communicator &group, double value) {
  if (group.size() == 1) return value;
  float v = float(value);
  DST_RETURN_IF_ERROR(group.AllReduceSum(&v, 1)->Wait());
  return double(v) / double(group.size());
}

}  // namespace dst
