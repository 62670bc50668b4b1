#include "core/layers/norm.h"

namespace dst {

template <typename T>
Norm<T>::Norm(NormKind kind, const std::string &prefix, int64_t C, double eps,
              ParamRegistry &registry)
    : kind_(kind), C_(C), eps_(eps) {
  w_ = registry.Add(prefix + ".weight", {C}, ParamInit::Constant(1));
  if (kind == NormKind::kLayerNorm)
    b_ = registry.Add(prefix + ".bias", {C}, ParamInit::Constant(0));
}

template <typename T>
void Norm<T>::Forward(const Pass<T> &pass, const T *x, int64_t rows, const NormSaved<T> &s) const {
  ParamStore<T> &p = pass.p;
  if (kind_ == NormKind::kLayerNorm)
    pass.k().LayerNormForwardStashing(x, p.param(w_), p.param(b_), rows, C_, s.out.fp32,
                                      s.out.Bf16Only(), s.mean, s.rstd);
  else
    pass.k().RmsNormForward(x, p.param(w_), rows, C_, eps_, s.out.fp32, s.out.Bf16Only(), s.rstd);
}

template <typename T>
void Norm<T>::AddForward(const Pass<T> &pass, const T *a, const T *b, T *res, int64_t rows,
                         const NormSaved<T> &s) const {
  ParamStore<T> &p = pass.p;
  if (kind_ == NormKind::kLayerNorm)
    pass.k().AddLayerNormForward(a, b, res, p.param(w_), p.param(b_), rows, C_, s.out.fp32,
                                 s.out.Bf16Only(), s.mean, s.rstd);
  else
    pass.k().AddRmsNormForward(a, b, res, p.param(w_), rows, C_, eps_, s.out.fp32,
                               s.out.Bf16Only(), s.rstd);
}

template <typename T>
void Norm<T>::Backward(const Pass<T> &pass, const T *dout, const T *x, const NormSaved<T> &s,
                       int64_t rows, T *dx, bool weights, T *grads, T *scratch) const {
  ParamStore<T> &p = pass.p;
  const int threads = pass.mb.max_threads;
  T *dw = weights ? WeightGrad(p, grads) : nullptr;
  if (kind_ == NormKind::kLayerNorm)
    pass.k().LayerNormBackward(dout, x, p.param(w_), s.mean, s.rstd, rows, C_, dx, dw,
                               weights ? BiasGrad(p, grads) : nullptr, scratch, threads);
  else
    pass.k().RmsNormBackward(dout, x, p.param(w_), s.rstd, rows, C_, dx, dw, scratch, threads);
}

template <typename T>
void Norm<T>::WeightBackward(const Pass<T> &pass, const T *dout, const T *x, const NormSaved<T> &s,
                             int64_t rows, T *grads, T *scratch) const {
  ParamStore<T> &p = pass.p;
  const int threads = pass.mb.max_threads;
  if (kind_ == NormKind::kLayerNorm)
    pass.k().LayerNormParamBackward(dout, x, s.mean, s.rstd, rows, C_, WeightGrad(p, grads),
                                    BiasGrad(p, grads), scratch, threads);
  else
    pass.k().RmsNormParamBackward(dout, x, s.rstd, rows, C_, WeightGrad(p, grads), scratch,
                                  threads);
}

template <typename T>
void Norm<T>::AddGrads(const Pass<T> &pass, const T *grads) const {
  pass.k().AddInPlace(grads, C_, pass.p.grad(w_));
  if (b_ >= 0) pass.k().AddInPlace(grads + C_, C_, pass.p.grad(b_));
}

template class Norm<float>;
template class Norm<double>;

}  // namespace dst
