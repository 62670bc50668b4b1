// Megatron's parallel linear layers as building blocks (nn.Linear's
// convention: y = x W^T + b, W [out, in], declared with its global shape and
// a TensorSplit, so every rank stores and initialises its slice of the same
// global values):
//
//   column  W split along `out` (in `groups` blocks each cut the same way: a
//           fused [q; k; v] projection split by heads), the bias with it:
//           y' = x W'^T + b' [rows, out / tp] on every row of the region.
//   row     W split along `in`, the bias whole: each rank multiplies its
//           slice of the input features; the partial products are summed
//           over the group and the bias added once (SumRowParallel).
//
// The blocks compute inside a tensor-parallel region on all N token rows.
// Entering a region (GatherRegionInput) all-gathers the rows under sequence
// parallelism (a rank holds N / tp of them outside); leaving one
// (SumRowParallel) all-reduces the row-parallel partial sums, or
// reduce-scatters them to this rank's rows. A column-parallel input gradient
// is a partial sum too (ColumnParallelBackward). Without tensor parallelism
// every collective is a no-op and the bias of a row split goes into its GEMM.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "core/layers/layer.h"
#include "core/tensor_parallel/tp_group.h"

namespace dst {

// What one call of a block runs on: the micro-batch (its kernels) and the
// parameters.
template <typename T>
struct Pass {
  const MicroBatch<T> &mb;
  ParamStore<T> &p;
  const Kernels<T> &k() const { return *mb.kernels; }
};

// Whether a GEMM multiplying in `compute` on the pass's backend writes its
// input's bf16 copy (Kernels::LinearForwardStashing).
template <typename T>
bool WritesBf16Copy(const Pass<T> &pass, ComputeType compute) {
  return compute == ComputeType::kBf16 && pass.k().KeepsBf16Copies();
}

template <typename T>
class ParallelLinear {
 public:
  enum class Split { kColumn, kRow };
  struct Options {
    bool bias = true;
    ParamInit weight_init = ParamInit::Normal(0.02);
    ParamInit bias_init = ParamInit::Constant(0);
    int64_t groups = 1;  // column: `out` is this many blocks, each split across the ranks
    int64_t padded = 0;  // column: `out` held padded to this many rows (TensorSplit::padded)
  };
  ParallelLinear() = default;
  // `name`: the tensors are name + ".weight" / ".bias"; in, out: global features.
  ParallelLinear(Split split, const std::string &name, int64_t in, int64_t out,
                 const Options &options, const TensorParallelGroup &tp, ParamRegistry &registry);

  // A column split reading another layer's weight (a tied LM head reads the
  // token embedding's vocabulary shard): no tensors of its own, no bias.
  static ParallelLinear TiedColumn(int weight_id, int64_t in, int64_t out_local, bool parallel) {
    ParallelLinear l;
    l.w_ = weight_id;
    l.in_ = in;
    l.out_ = out_local;
    l.parallel_ = parallel;
    return l;
  }

  // Column splits that lie back to back read as one: `first` (q_proj) with
  // `out` this rank's rows of it and of the splits after it (k_proj,
  // v_proj). One GEMM then writes the packed [q | k | v] rows and one reads
  // them back, as for a fused projection (a wider GEMM runs nearer the peak
  // than three narrow ones, and nothing is copied between the packed rows
  // and the parts). Valid only while each part Follows() the one before.
  static ParallelLinear Stacked(const ParallelLinear &first, int64_t out) {
    ParallelLinear l = first;
    l.out_ = out;
    return l;
  }
  // Whether this split's weight (and its bf16 copy) and bias start in p
  // where `prev`'s end, and with `grads` their gradients too.
  bool Follows(ParamStore<T> &p, const ParallelLinear &prev, bool grads) const;

  int64_t in() const { return in_; }    // this rank's input features
  int64_t out() const { return out_; }  // this rank's output features
  bool column() const { return split_ == Split::kColumn; }
  int weight_id() const { return w_; }
  int bias_id() const { return b_; }
  // The bias the region adds after summing a row split (null otherwise).
  const T *SummedBias(ParamStore<T> &p) const {
    return !column() && parallel_ && b_ >= 0 ? p.param(b_) : nullptr;
  }

  // y [rows, out'] = x W'^T, + the bias (a row split's only without tensor
  // parallelism: SumRowParallel adds it after the sum). x's bf16 copy is
  // written and read as LinearForwardStashing says.
  void Forward(const Pass<T> &pass, Operand<T> x, T *y, int64_t rows, ComputeType compute) const;
  // dx [rows, in'] = dy W' (assigns; skipped when null), then when `weights`
  // the weight's and bias's gradients (+=) from dy and x.
  void Backward(const Pass<T> &pass, const T *dy, Operand<T> x, T *dx, bool weights, int64_t rows,
                ComputeType compute) const;
  // The weight half alone.
  void WeightBackward(const Pass<T> &pass, const T *dy, Operand<T> x, int64_t rows,
                      ComputeType compute) const;

 private:
  T *BiasGrad(ParamStore<T> &p) const { return b_ >= 0 ? p.grad(b_) : nullptr; }
  Split split_ = Split::kColumn;
  bool parallel_ = false;  // tp > 1
  int64_t in_ = 0, out_ = 0;
  int w_ = -1, b_ = -1;
};

// The region's input with every row: under sequence parallelism this rank's
// rows `x` [N / tp, width] all-gathered into `whole` [N, width] (no bf16
// copy); otherwise x itself.
template <typename T>
Status GatherRegionInput(const Pass<T> &pass, const TensorParallelGroup &tp, Operand<T> x,
                         int64_t N, int64_t width, T *whole, Operand<T> *out, const char *what);

// Leaving a region: y [N, width] holds this rank's partial sums of row-split
// linears; they are summed over the group (all-reduce, or reduce-scatter
// under sequence parallelism) and `bias` (may be null) added to the sum.
// *rows: this rank's rows of the result, inside y.
template <typename T>
Status SumRowParallel(const Pass<T> &pass, const TensorParallelGroup &tp, T *y, int64_t N,
                      int64_t width, const T *bias, T **rows, const char *what);

// Column-split linears reading the same region input, with their output
// gradients: the input gradient dx = sum of dy_i W_i'.
template <typename T>
struct ColumnPart {
  const ParallelLinear<T> *linear;
  const T *dy;  // [N, linear->out()]
};

// Up to three column splits sharing an input (q, k, v), held without
// allocating (a training step allocates nothing after its first).
template <typename T>
class ColumnParts {
 public:
  ColumnParts() = default;
  ColumnParts(std::initializer_list<ColumnPart<T>> parts) {
    for (const ColumnPart<T> &p : parts) push_back(p);
  }
  void push_back(const ColumnPart<T> &p) { parts_[size_++] = p; }
  size_t size() const { return size_; }
  const ColumnPart<T> &operator[](size_t i) const { return parts_[i]; }
  const ColumnPart<T> &front() const { return parts_[0]; }
  const ColumnPart<T> *begin() const { return parts_; }
  const ColumnPart<T> *end() const { return parts_ + size_; }

 private:
  ColumnPart<T> parts_[3] = {};
  size_t size_ = 0;
};

// Where a column split's input is, for its weight gradients: the region's
// input itself (`whole`), or under sequence parallelism this rank's rows
// (`rows`), gathered again into `gathered` [N, in].
template <typename T>
struct RegionInput {
  Operand<T> whole;
  const T *rows = nullptr;
  T *gathered = nullptr;
};

// The input gradient of `parts` into dx [N, in] (assigns; tmp [N, in] holds
// each further part's before it is added), summed over the group (all-reduce;
// under sequence parallelism reduce-scattered, *dx_rows this rank's rows
// inside dx; otherwise dx itself), while their weight gradients run when
// `weights`. Without tensor parallelism each part's two gradients are one
// call (bf16 compute rounds dy once for both GEMMs).
template <typename T>
Status ColumnParallelBackward(const Pass<T> &pass, const TensorParallelGroup &tp,
                              const ColumnParts<T> &parts, const RegionInput<T> &x, T *dx, T *tmp,
                              bool weights, ComputeType compute, T **dx_rows, const char *what);

// The weight gradients of `parts` alone (x gathered again under sequence parallelism).
template <typename T>
Status ColumnParallelWeightBackward(const Pass<T> &pass, const TensorParallelGroup &tp,
                                    const ColumnParts<T> &parts, const RegionInput<T> &x,
                                    ComputeType compute, const char *what);

}  // namespace dst
