// A normalisation over each row's C features as a building block: LayerNorm
// (GPT-2, BLOOM: weight and bias, mean and rstd saved) or RMSNorm (LLaMA:
// weight only, rstd saved). Its tensors are whole on every tensor-parallel
// rank; under sequence parallelism it runs on this rank's rows, so its
// parameter gradients are partial sums the layer adds over the group
// (Megatron #1446: the final norm too).
#pragma once

#include <string>

#include "core/layers/linear.h"

namespace dst {

enum class NormKind { kLayerNorm, kRmsNorm };

// A norm's saved tensors in one micro-batch: its output (a GEMM operand)
// and its statistics (mean null for RMSNorm).
template <typename T>
struct NormSaved {
  Operand<T> out;
  T *mean = nullptr;
  T *rstd = nullptr;
};

template <typename T>
class Norm {
 public:
  Norm() = default;
  // Declares `prefix`.weight (and .bias for LayerNorm), C features.
  Norm(NormKind kind, const std::string &prefix, int64_t C, double eps, ParamRegistry &registry);

  NormKind kind() const { return kind_; }
  bool has_mean() const { return kind_ == NormKind::kLayerNorm; }
  // Elements of its parameter gradients (weight, then bias).
  int64_t grad_size() const { return kind_ == NormKind::kLayerNorm ? 2 * C_ : C_; }
  // Elements of the scratch its backward needs: [threads, 2C].
  int64_t ScratchSize(int max_threads) const { return int64_t(max_threads) * 2 * C_; }

  // x [rows, C] -> s.out (its fp32 values, or its bf16 copy alone), s.mean, s.rstd.
  void Forward(const Pass<T> &pass, const T *x, int64_t rows, const NormSaved<T> &s) const;
  // The residual sum res = a + b [rows, C], then Forward of res (one pass).
  void AddForward(const Pass<T> &pass, const T *a, const T *b, T *res, int64_t rows,
                  const NormSaved<T> &s) const;
  // dx [rows, C] += the input gradient (x: the forward's input); the
  // parameter gradients += into `grads` [grad_size()] (weight, then bias;
  // null: the store's own gradients; `weights` false: none).
  void Backward(const Pass<T> &pass, const T *dout, const T *x, const NormSaved<T> &s,
                int64_t rows, T *dx, bool weights, T *grads, T *scratch) const;
  // The parameter gradients alone (+=, as Backward's).
  void WeightBackward(const Pass<T> &pass, const T *dout, const T *x, const NormSaved<T> &s,
                      int64_t rows, T *grads, T *scratch) const;
  // Adds summed gradients [grad_size()] into the store's.
  void AddGrads(const Pass<T> &pass, const T *grads) const;
  const T *weight(ParamStore<T> &p) const { return p.param(w_); }

 private:
  T *WeightGrad(ParamStore<T> &p, T *grads) const { return grads ? grads : p.grad(w_); }
  T *BiasGrad(ParamStore<T> &p, T *grads) const {
    return b_ < 0 ? nullptr : (grads ? grads + C_ : p.grad(b_));
  }

  NormKind kind_ = NormKind::kLayerNorm;
  int64_t C_ = 0;
  double eps_ = 1e-5;
  int w_ = -1, b_ = -1;
};

}  // namespace dst
