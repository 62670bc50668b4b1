// The transformer's feed-forward block, Megatron's tensor-parallel way: the
// first projection(s) column-split (every rank holds ffn / tp features), the
// activation on a rank's features, the output projection row-split (its
// partial sums leave the region through SumRowParallel, which the layer
// calls). Two kinds:
//   GELU    out = proj(gelu(fc(x)))           GPT-2's c_fc / c_proj, BLOOM's
//                                              dense_h_to_4h / dense_4h_to_h
//   SwiGLU  out = down(silu(gate(x)) * up(x))  LLaMA's gate_proj, up_proj, down_proj
#pragma once

#include <string>
#include <vector>

#include "core/layers/linear.h"
#include "core/layers/scratch.h"

namespace dst {

enum class MlpKind { kGelu, kSwiGlu };

struct MlpConfig {
  int64_t d_model = 0;
  int64_t ffn = 0;  // intermediate features (GPT-2: 4 d_model)
  MlpKind kind = MlpKind::kGelu;
  bool bias = true;
  ParamInit init = ParamInit::Normal(0.02);
  ParamInit out_init = ParamInit::Normal(0.02);  // the output projection's weight
};

// The family's tensor names (without ".weight"/".bias"): GELU: fc, out;
// SwiGLU: gate, up, out.
struct MlpNames {
  std::string fc, gate, up, out;
};

// One micro-batch's saved tensors of the block, [N, ffn'] each.
template <typename T>
struct MlpSaved {
  Operand<T> fc;   // GELU: its input (fc's output); SwiGLU: the gate's output
  Operand<T> up;   // SwiGLU: up's output
  Operand<T> act;  // the activation's output: the output projection's input
};

template <typename T>
class Mlp {
 public:
  Mlp() = default;
  Mlp(const MlpConfig &config, const MlpNames &names, const TensorParallelGroup &tp,
      ParamRegistry &registry);

  int64_t ffn() const { return ffn_; }  // this rank's features
  MlpKind kind() const { return config_.kind; }
  const ParallelLinear<T> &output() const { return out_; }

  // x: the region input [N, C] -> s -> the output projection's partial sums
  // into `out` [N, C]. The GELU input kept in bf16 alone gets its fp32
  // values in `scratch`.
  void Forward(const Pass<T> &pass, Operand<T> x, const MlpSaved<T> &s, T *out,
               ScratchCursor<T> &scratch) const;
  // dout [N, C] (the output projection's output gradient, every row) ->
  // the region input's gradient dx [N, C] summed over the group (*dx_rows:
  // this rank's rows of it), and when `weights` every parameter gradient.
  // d_act, d_up [N, ffn']: the activation's input gradients (kept for the
  // weight half when it runs later); tmp [N, C].
  Status Backward(const Pass<T> &pass, const TensorParallelGroup &tp, const T *dout,
                  const MlpSaved<T> &s, const RegionInput<T> &x, T *d_act, T *d_up, T *dx, T *tmp,
                  bool weights, T **dx_rows) const;
  // The weight half: dout as Backward's, d_act and d_up as it left them.
  Status WeightBackward(const Pass<T> &pass, const TensorParallelGroup &tp, const T *dout,
                        const MlpSaved<T> &s, const RegionInput<T> &x, const T *d_act,
                        const T *d_up) const;

 private:
  ComputeType Compute(const Pass<T> &pass) const { return pass.mb.ComputeOf(ModuleType::kLinear); }
  ColumnParts<T> Parts(const T *d_act, const T *d_up) const;
  MlpConfig config_;
  int64_t ffn_ = 0;
  ParallelLinear<T> fc_, up_, out_;  // fc_: GELU's fc, or the gate
};

}  // namespace dst
