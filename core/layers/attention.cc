#include "core/layers/attention.h"

#include <algorithm>

namespace dst {

template <typename T>
SelfAttention<T>::SelfAttention(const AttentionConfig &config, const AttentionNames &names,
                                const TensorParallelGroup &tp, ParamRegistry &registry)
    : config_(config),
      tp_(tp),
      heads_(config.n_head / tp.size),
      kv_heads_(config.n_kv_head / tp.size),
      q_width_(heads_ * config.head_dim),
      kv_width_(kv_heads_ * config.head_dim) {
  const int64_t C = config.d_model, hs = config.head_dim;
  typename ParallelLinear<T>::Options in{config.qkv_bias, config.init, ParamInit::Constant(0), 1};
  using Split = typename ParallelLinear<T>::Split;
  switch (config.qkv) {
    case QkvLayout::kFused:  // [q; k; v] blocks, each split by heads
      in.groups = 3;
      projections_.emplace_back(Split::kColumn, names.qkv, C, 3 * config.n_head * hs, in, tp,
                                registry);
      break;
    case QkvLayout::kFusedInterleaved:  // whole heads are contiguous rows
      projections_.emplace_back(Split::kColumn, names.qkv, C, 3 * config.n_head * hs, in, tp,
                                registry);
      break;
    case QkvLayout::kSeparate:
      projections_.emplace_back(Split::kColumn, names.q, C, config.n_head * hs, in, tp, registry);
      projections_.emplace_back(Split::kColumn, names.k, C, config.n_kv_head * hs, in, tp,
                                registry);
      projections_.emplace_back(Split::kColumn, names.v, C, config.n_kv_head * hs, in, tp,
                                registry);
      stacked_ = ParallelLinear<T>::Stacked(projections_[0], qkv_width());
      break;
  }
  out_ = ParallelLinear<T>(Split::kRow, names.out, config.n_head * hs, C,
                           {config.out_bias, config.out_init, ParamInit::Constant(0), 1}, tp,
                           registry);
}

AttentionShape AttentionShapeOf(const AttentionConfig &config, int64_t tp_size, int64_t tp_rank,
                                int64_t B, int64_t T) {
  const int64_t heads = config.n_head / tp_size;
  AttentionShape s{B, T, heads * config.head_dim, heads};
  s.kv_heads = config.n_kv_head / tp_size;
  s.interleaved = config.qkv == QkvLayout::kFusedInterleaved;
  s.alibi_heads = config.alibi ? config.n_head : 0;
  s.first_head = tp_rank * heads;
  return s;
}

template <typename T>
AttentionShape SelfAttention<T>::Shape(int64_t B, int64_t T_) const {
  return AttentionShapeOf(config_, tp_.size, tp_.rank, B, T_);
}

template <typename T>
void SelfAttention<T>::Forward(const Pass<T> &pass, Operand<T> x, const AttentionSaved<T> &s,
                               T *out, ScratchCursor<T> &scratch) const {
  const Kernels<T> &k = pass.k();
  const int64_t N = pass.mb.rows(), W = qkv_width();
  const ComputeType compute = Compute(pass);
  AttentionShape shape = Shape(pass.mb.B, pass.mb.seq);
  shape.position = pass.mb.position;
  // A GEMM's fp32 output of a tensor kept in bf16 alone goes to the scratch;
  // its reader rounds it into the stash.
  T *qkv = s.qkv.fp32 ? s.qkv.fp32 : scratch.Take(N * W);
  T *y = s.y.fp32 ? s.y.fp32 : scratch.Take(N * q_width_);
  if (projections_.size() == 1) {
    projections_[0].Forward(pass, x, qkv, N, compute);
  } else if (Stacked(pass.p, false)) {
    stacked_.Forward(pass, x, qkv, N, compute);
  } else {  // each projection's output packed into its columns of qkv
    T *part = scratch.Take(N * std::max(q_width_, kv_width_));
    int64_t column = 0;
    for (const ParallelLinear<T> &projection : projections_) {
      projection.Forward(pass, x, part, N, compute);
      k.CopyRows(part, projection.out(), N, projection.out(), qkv + column, W);
      column += projection.out();
      x = x.AfterGemm(WritesBf16Copy(pass, compute));  // the next reads the copy the first wrote
    }
  }
  if (config_.rotary) k.Rotary(qkv, shape, config_.rope, /*inverse=*/false);
  if (pass.mb.kv)  // generation: this layer's cache holds the earlier positions
    k.AttentionCached(qkv, shape, *pass.mb.kv, y, compute);
  else
    k.AttentionForwardStashing(qkv, s.qkv.bf16, shape, s.att.fp32, s.att.bf16, y, compute);
  out_.Forward(pass, Operand<T>{y, s.y.bf16, false}, out, N, compute);
}

template <typename T>
void SelfAttention<T>::RecomputeProbabilities(const Pass<T> &pass, const AttentionSaved<T> &s,
                                              T *y_scratch) const {
  const Kernels<T> &k = pass.k();
  const AttentionShape shape = Shape(pass.mb.B, pass.mb.seq);
  if (s.qkv.only16)  // from the copy the forward multiplied
    k.AttentionForwardStashing(nullptr, s.qkv.bf16, shape, s.att.fp32, nullptr, y_scratch,
                               Compute(pass));
  else
    k.AttentionForward(s.qkv.fp32, shape, s.att.fp32, y_scratch, Compute(pass));
}

template <typename T>
void SelfAttention<T>::OutputBackward(const Pass<T> &pass, const T *dy, const AttentionSaved<T> &s,
                                      T *d_y, bool weights) const {
  out_.Backward(pass, dy, s.y, d_y, weights, pass.mb.rows(), Compute(pass));
}

template <typename T>
void SelfAttention<T>::CoreBackward(const Pass<T> &pass, const T *d_y, const AttentionSaved<T> &s,
                                    T *dqkv, T *att_scratch) const {
  const Kernels<T> &k = pass.k();
  const AttentionShape shape = Shape(pass.mb.B, pass.mb.seq);
  k.AttentionBackwardStashed(d_y, s.qkv.fp32, s.qkv.bf16, s.att.fp32, s.att.bf16, shape, dqkv,
                             att_scratch, Compute(pass));
  if (config_.rotary) k.Rotary(dqkv, shape, config_.rope, /*inverse=*/true);
}

template <typename T>
bool SelfAttention<T>::Stacked(ParamStore<T> &p, bool grads) const {
  return projections_.size() == 3 && projections_[1].Follows(p, projections_[0], grads) &&
         projections_[2].Follows(p, projections_[1], grads);
}

template <typename T>
ColumnParts<T> SelfAttention<T>::InputParts(const Pass<T> &pass, const T *dqkv, T *unpacked) const {
  if (projections_.size() == 1) return {{&projections_[0], dqkv}};
  if (Stacked(pass.p, true)) return {{&stacked_, dqkv}};
  const int64_t N = pass.mb.rows(), W = qkv_width();
  ColumnParts<T> parts;
  int64_t column = 0;
  T *next = unpacked;
  for (const ParallelLinear<T> &projection : projections_) {
    pass.k().CopyRows(dqkv + column, W, N, projection.out(), next, projection.out());
    parts.push_back({&projection, next});
    column += projection.out();
    next += N * projection.out();
  }
  return parts;
}

template class SelfAttention<float>;
template class SelfAttention<double>;

}  // namespace dst
