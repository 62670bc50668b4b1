// Megatron's parallel linear layers (nn.Linear convention: y = x W^T + b,
// W [out, in] declared with its global shape and a TensorSplit, so each rank
// stores and initialises its slice of the same global values):
//
//   column            W split along out (dim 0), b split: y_local = x W_local^T
//                     + b_local, [rows, out / tp]; backward: the input
//                     gradient's partial sums all-reduced over the tp group
//                     (launched before the weight-gradient GEMM, waited after:
//                     the two overlap).
//   column, gathered  the same, then the output all-gathered to [rows, out];
//                     backward takes this rank's columns of the gradient.
//   row               W split along in (dim 1), b whole: the input is this
//                     rank's slice [rows, in / tp]; y = all-reduce(x_local
//                     W_local^T) + b; backward is local (the output gradient
//                     is the same on every rank).
//
// Under sequence parallelism (sequence_parallel.h) the inputs of column and
// gathered layers and the outputs of row and gathered layers are this rank's
// rows: the input is all-gathered before the GEMM (and again for the weight
// gradient), a row layer's output reduce-scattered, a gathered layer keeps its
// rows of the all-gathered output; backward gathers the output gradient's
// rows (row, gathered) and reduce-scatters the input gradient (column,
// gathered).
//
// A failed collective is recorded (Layer::TakeError) and the layer stops.
#pragma once

#include <string>

#include "core/layers/layer.h"
#include "core/tensor_parallel/tp_group.h"
#include "core/tensor_parallel/tp_role.h"

namespace dst {

template <typename T>
class TensorParallelLinear final : public Layer<T> {
 public:
  // `role`: kColumn, kColumnGathered or kRow; in/out: the global features.
  TensorParallelLinear(const std::string &prefix, int64_t in, int64_t out, bool bias, TpRole role,
                       const TensorParallelGroup &tp, ParamRegistry &registry);
  std::string_view Kind() const override { return "linear"; }
  int64_t OutWidth() const override { return role_ == TpRole::kColumn ? out_local_ : out_; }
  // Saves its output [rows, OutWidth()].
  std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &limits) const override;
  // Gathered: the all-gather's buffer and this rank's output columns [rows, out].
  int64_t ScratchSize(const ActivationLimits &limits) const override;
  void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) override;
  void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                const MicroBatch<T> &mb) override;
  // Deferred: this rank's output gradient [rows, local out].
  std::vector<SavedTensorSpec> DeferredTensors(const ActivationLimits &limits) const override;
  void BackwardInput(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                     LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  void BackwardWeight(const T *in, const LayerActivations<T> &act,
                      const LayerActivations<T> &deferred, const MicroBatch<T> &mb) override;
  double ForwardFlops(int64_t B, int64_t) const override {
    return 2.0 * double(B) * double(in_local_) * double(out_local_);
  }

 private:
  struct Scratch {  // views of mb.scratch (ScratchSize)
    T *input = nullptr, *output = nullptr, *gradient = nullptr, *columns = nullptr,
      *partial = nullptr;
  };
  Scratch ScratchOf(const MicroBatch<T> &mb) const;
  // The layer's input with every rank's rows (sequence parallelism gathers
  // them; a row-parallel input has them all). Null on failure.
  const T *WholeInput(const T *in, const MicroBatch<T> &mb);
  // The output gradient this rank's weights see: dout itself, or (gathered)
  // its columns copied to the scratch.
  const T *LocalGradient(const T *dout, const MicroBatch<T> &mb);
  // dx = dy_local W_local; column: all-reduced over the group, with the
  // weight gradients (if `weights`) computed while it runs.
  void InputGradient(const T *dy_local, const T *in, T *din, const MicroBatch<T> &mb, bool weights);
  void WeightGradient(const T *dy_local, const T *in, const MicroBatch<T> &mb);
  // Waits for a collective; records its failure.
  bool Finish(std::unique_ptr<Work> work);

  TpRole role_;
  TensorParallelGroup tp_;
  int64_t in_, out_, in_local_, out_local_;
  bool bias_ = false;
  int w_ = -1, b_ = -1;
};

}  // namespace dst
