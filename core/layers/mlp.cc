#include "core/layers/mlp.h"

namespace dst {

template <typename T>
Mlp<T>::Mlp(const MlpConfig &config, const MlpNames &names, const TensorParallelGroup &tp,
            ParamRegistry &registry)
    : config_(config), ffn_(config.ffn / tp.size) {
  using Split = typename ParallelLinear<T>::Split;
  const typename ParallelLinear<T>::Options in{config.bias, config.init, ParamInit::Constant(0), 1};
  const int64_t C = config.d_model;
  if (config.kind == MlpKind::kGelu) {
    fc_ = ParallelLinear<T>(Split::kColumn, names.fc, C, config.ffn, in, tp, registry);
  } else {
    fc_ = ParallelLinear<T>(Split::kColumn, names.gate, C, config.ffn, in, tp, registry);
    up_ = ParallelLinear<T>(Split::kColumn, names.up, C, config.ffn, in, tp, registry);
  }
  out_ = ParallelLinear<T>(Split::kRow, names.out, config.ffn, C,
                           {config.bias, config.out_init, ParamInit::Constant(0), 1}, tp,
                           registry);
}

template <typename T>
void Mlp<T>::Forward(const Pass<T> &pass, Operand<T> x, const MlpSaved<T> &s, T *out,
                     ScratchCursor<T> &scratch) const {
  const Kernels<T> &k = pass.k();
  const int64_t N = pass.mb.rows(), F = ffn_;
  const ComputeType compute = Compute(pass);
  if (config_.kind == MlpKind::kGelu) {
    T *fch = s.fc.fp32 ? s.fc.fp32 : scratch.Take(N * F);
    fc_.Forward(pass, x, fch, N, compute);
    k.GeluForwardStashing(fch, N * F, s.act.fp32, s.act.Bf16Only(), s.fc.Bf16Only());
  } else {
    fc_.Forward(pass, x, s.fc.fp32, N, compute);
    up_.Forward(pass, x.AfterGemm(WritesBf16Copy(pass, compute)), s.up.fp32, N, compute);
    k.SiluMulForward(s.fc.fp32, s.up.fp32, N * F, s.act.fp32, s.act.Bf16Only());
  }
  out_.Forward(pass, s.act, out, N, compute);
}

template <typename T>
ColumnParts<T> Mlp<T>::Parts(const T *d_act, const T *d_up) const {
  if (config_.kind == MlpKind::kGelu) return {{&fc_, d_act}};
  return {{&fc_, d_act}, {&up_, d_up}};
}

template <typename T>
Status Mlp<T>::Backward(const Pass<T> &pass, const TensorParallelGroup &tp, const T *dout,
                        const MlpSaved<T> &s, const RegionInput<T> &x, T *d_act, T *d_up, T *dx,
                        T *tmp, bool weights, T **dx_rows) const {
  const Kernels<T> &k = pass.k();
  ParamStore<T> &p = pass.p;
  const int64_t N = pass.mb.rows(), F = ffn_;
  const ComputeType compute = Compute(pass);
  out_.Backward(pass, dout, s.act, d_act, weights, N, compute);
  if (config_.kind == MlpKind::kSwiGlu) {
    k.SiluMulBackward(d_act, s.fc.fp32, s.up.fp32, N * F, d_act, d_up);
  } else if (weights && tp.size == 1) {
    // GELU's backward feeding fc's in one pass (its gradient not kept).
    *dx_rows = dx;
    k.GeluLinearBackwardStashed(d_act, s.fc.fp32, s.fc.Bf16Only(), x.whole.fp32, x.whole.bf16,
                                p.param(fc_.weight_id()), p.param16(fc_.weight_id()), N,
                                fc_.in(), F, dx, p.grad(fc_.weight_id()),
                                fc_.bias_id() >= 0 ? p.grad(fc_.bias_id()) : nullptr, compute);
    return Status::Ok();
  } else {
    k.GeluBackwardStashed(d_act, s.fc.fp32, s.fc.Bf16Only(), N * F, d_act);
  }
  return ColumnParallelBackward(pass, tp, Parts(d_act, d_up), x, dx, tmp, weights, compute, dx_rows,
                                "MLP input gradient");
}

template <typename T>
Status Mlp<T>::WeightBackward(const Pass<T> &pass, const TensorParallelGroup &tp, const T *dout,
                              const MlpSaved<T> &s, const RegionInput<T> &x, const T *d_act,
                              const T *d_up) const {
  out_.WeightBackward(pass, dout, s.act, pass.mb.rows(), Compute(pass));
  return ColumnParallelWeightBackward(pass, tp, Parts(d_act, d_up), x, Compute(pass), "MLP input");
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace dst
