#include "core/layers/linear.h"

#include <cstdint>

#include "core/tensor_parallel/sequence_parallel.h"
#include "core/tensor_parallel/tp_comm.h"

namespace dst {

template <typename T>
ParallelLinear<T>::ParallelLinear(Split split, const std::string &name, int64_t in, int64_t out,
                                  const Options &options, const TensorParallelGroup &tp,
                                  ParamRegistry &registry)
    : split_(split), parallel_(tp.size > 1), in_(in), out_(out) {
  const bool column = split == Split::kColumn;
  if (column && options.padded > 0) out_ = options.padded;
  (column ? out_ : in_) /= tp.size;
  const TensorSplit weight_split =
      column ? TensorSplit{0, tp.size, tp.rank, options.groups, options.padded}
             : TensorSplit{1, tp.size, tp.rank};
  w_ = registry.Add(name + ".weight", {out, in}, options.weight_init, weight_split);
  if (options.bias)
    b_ = registry.Add(
        name + ".bias", {out}, options.bias_init,
        column ? TensorSplit{0, tp.size, tp.rank, options.groups, options.padded} : TensorSplit{});
  // Every GEMM that reads the weight passes its bf16 copy (p.param16).
  registry.MarkBf16GemmWeight(w_);
}

template <typename T>
void ParallelLinear<T>::Forward(const Pass<T> &pass, Operand<T> x, T *y, int64_t rows,
                                ComputeType compute) const {
  ParamStore<T> &p = pass.p;
  const T *bias = b_ >= 0 && (column() || !parallel_) ? p.param(b_) : nullptr;
  pass.k().LinearForwardStashing(x.fp32, x.bf16, p.param(w_), p.param16(w_), bias, rows, in_, out_,
                                 y, compute);
}

template <typename T>
void ParallelLinear<T>::Backward(const Pass<T> &pass, const T *dy, Operand<T> x, T *dx,
                                 bool weights, int64_t rows, ComputeType compute) const {
  ParamStore<T> &p = pass.p;
  if (!weights) {
    pass.k().LinearBackwardStashed(dy, nullptr, nullptr, p.param(w_), p.param16(w_), rows, in_,
                                   out_, dx, nullptr, nullptr, compute);
    return;
  }
  pass.k().LinearBackwardStashed(dy, x.fp32, x.bf16, p.param(w_), p.param16(w_), rows, in_, out_,
                                 dx, p.grad(w_), BiasGrad(p), compute);
}

template <typename T>
void ParallelLinear<T>::WeightBackward(const Pass<T> &pass, const T *dy, Operand<T> x, int64_t rows,
                                       ComputeType compute) const {
  ParamStore<T> &p = pass.p;
  pass.k().LinearWeightBackwardStashed(dy, x.fp32, x.bf16, rows, in_, out_, p.grad(w_), BiasGrad(p),
                                       compute);
}

namespace {

// Whether `next` starts where `prev`'s n elements end (both set). As
// addresses: the two may be separate allocations.
template <typename P>
bool Adjacent(const P *prev, int64_t n, const P *next) {
  return prev != nullptr && next != nullptr &&
         reinterpret_cast<uintptr_t>(prev) + uintptr_t(n) * sizeof(P) ==
             reinterpret_cast<uintptr_t>(next);
}

}  // namespace

template <typename T>
bool ParallelLinear<T>::Follows(ParamStore<T> &p, const ParallelLinear &prev, bool grads) const {
  if (!column() || !prev.column() || in_ != prev.in_ || (b_ >= 0) != (prev.b_ >= 0)) return false;
  const int64_t w = prev.out_ * prev.in_, b = prev.out_;
  if (!Adjacent(p.param(prev.w_), w, p.param(w_))) return false;
  const uint16_t *prev16 = p.param16(prev.w_), *next16 = p.param16(w_);
  if ((prev16 != nullptr || next16 != nullptr) && !Adjacent(prev16, w, next16)) return false;
  if (b_ >= 0 && !Adjacent(p.param(prev.b_), b, p.param(b_))) return false;
  if (!grads) return true;
  if (!Adjacent(p.grad(prev.w_), w, p.grad(w_))) return false;
  return b_ < 0 || Adjacent(p.grad(prev.b_), b, p.grad(b_));
}

namespace {

Status Named(Status st, const std::string &what) {
  return st.ok() ? st : st.context(what);
}

}  // namespace

template <typename T>
Status GatherRegionInput(const Pass<T> &pass, const TensorParallelGroup &tp, Operand<T> x,
                         int64_t N, int64_t width, T *whole, Operand<T> *out, const char *what) {
  if (!tp.splits_rows()) {
    *out = x;
    return Status::Ok();
  }
  *out = Operand<T>::Of(whole);
  return TpWait(tp, GatherRows(pass.k(), tp, x.fp32, LocalRows(tp, N), width, whole),
                (std::string(what) + " (all-gather)").c_str());
}

template <typename T>
Status SumRowParallel(const Pass<T> &pass, const TensorParallelGroup &tp, T *y, int64_t N,
                      int64_t width, const T *bias, T **rows, const char *what) {
  *rows = y;
  if (tp.size == 1) return Status::Ok();  // the bias went into the GEMM
  const int64_t n = LocalRows(tp, N);
  if (tp.splits_rows()) {
    DST_RETURN_IF_ERROR(TpWait(tp, ReduceScatterRows(tp, y, n, width),
                               (std::string(what) + " (reduce-scatter)").c_str()));
    *rows = RowsOf(tp, y, n, width);
  } else {
    DST_RETURN_IF_ERROR(TpWait(tp, TpAllReduce(tp, y, N * width), what));
  }
  if (bias) pass.k().AddBiasToRows(bias, n, width, *rows);
  return Status::Ok();
}

template <typename T>
Status ColumnParallelBackward(const Pass<T> &pass, const TensorParallelGroup &tp,
                              const ColumnParts<T> &parts, const RegionInput<T> &x, T *dx, T *tmp,
                              bool weights, ComputeType compute, T **dx_rows, const char *what) {
  const Kernels<T> &k = pass.k();
  const int64_t N = pass.mb.rows(), in = parts.front().linear->in();
  *dx_rows = dx;
  const bool parallel = tp.size > 1;
  for (size_t i = 0; i < parts.size(); ++i) {
    T *d = i == 0 ? dx : tmp;
    // Without tensor parallelism both gradients in one call.
    parts[i].linear->Backward(pass, parts[i].dy, x.whole, d, weights && !parallel, N, compute);
    if (i > 0) k.AddInPlace(tmp, N * in, dx);
  }
  if (!parallel) return Status::Ok();
  const int64_t n = LocalRows(tp, N);
  std::unique_ptr<Work> sum =
      tp.splits_rows() ? ReduceScatterRows(tp, dx, n, in) : TpAllReduce(tp, dx, N * in);
  if (weights) {  // while the sum runs
    Status st = ColumnParallelWeightBackward(pass, tp, parts, x, compute, what);
    if (!st.ok()) {
      (void)TpWait(tp, std::move(sum), what);
      return st;
    }
  }
  if (tp.splits_rows()) {
    DST_RETURN_IF_ERROR(
        TpWait(tp, std::move(sum), (std::string(what) + " (reduce-scatter)").c_str()));
    *dx_rows = RowsOf(tp, dx, n, in);
    return Status::Ok();
  }
  return TpWait(tp, std::move(sum), what);
}

template <typename T>
Status ColumnParallelWeightBackward(const Pass<T> &pass, const TensorParallelGroup &tp,
                                    const ColumnParts<T> &parts, const RegionInput<T> &x,
                                    ComputeType compute, const char *what) {
  const int64_t N = pass.mb.rows(), in = parts.front().linear->in();
  Operand<T> input = x.whole;
  if (tp.splits_rows()) {
    Status st = GatherRegionInput(pass, tp, Operand<T>::Of(const_cast<T *>(x.rows)), N, in,
                                  x.gathered, &input, what);
    DST_RETURN_IF_ERROR(Named(st, "input of the weight gradient"));
  }
  for (const ColumnPart<T> &part : parts)
    part.linear->WeightBackward(pass, part.dy, input, N, compute);
  return Status::Ok();
}

#define DST_INSTANTIATE(T)                                                                        \
  template class ParallelLinear<T>;                                                               \
  template Status GatherRegionInput<T>(const Pass<T> &, const TensorParallelGroup &, Operand<T>,  \
                                       int64_t, int64_t, T *, Operand<T> *, const char *);        \
  template Status SumRowParallel<T>(const Pass<T> &, const TensorParallelGroup &, T *, int64_t,   \
                                    int64_t, const T *, T **, const char *);                      \
  template Status ColumnParallelBackward<T>(const Pass<T> &, const TensorParallelGroup &,         \
                                            const ColumnParts<T> &, const RegionInput<T> &, T *,  \
                                            T *, bool, ComputeType, T **, const char *);          \
  template Status ColumnParallelWeightBackward<T>(const Pass<T> &, const TensorParallelGroup &,   \
                                                  const ColumnParts<T> &, const RegionInput<T> &, \
                                                  ComputeType, const char *);
DST_INSTANTIATE(float)
DST_INSTANTIATE(double)
#undef DST_INSTANTIATE

}  // namespace dst
