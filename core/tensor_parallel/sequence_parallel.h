// Sequence parallelism (Megatron's --sequence-parallel) over the
// tensor-parallel group: outside the tensor-parallel regions (LayerNorms,
// residual adds, the embedding's positions, the pipeline's messages) a tp
// rank holds rows [rank * n, (rank + 1) * n) of a micro-batch's N = B x T
// token rows, n = N / tp. Entering a region all-gathers the rows (where
// plain tensor parallelism has nothing to do in forward); leaving one
// reduce-scatters the partial sums (where it all-reduces). The backward
// mirrors it: the input gradient of a column-parallel layer is
// reduce-scattered, the output gradient of a row-parallel one gathered. The
// same bytes as tensor parallelism's all-reduces, and the row-wise
// activations (LayerNorm inputs and outputs, the residual stream) shrink by tp.
// The tensors every tp rank holds whole then see only their rows'
// contributions: their gradients are summed over the group (LayerNorm
// weights, including the final one — Megatron #1446; a row-parallel bias's
// gradient is taken from the gathered output gradient, whole on every rank).
#pragma once

#include <memory>

#include "core/kernels/kernels.h"
#include "core/tensor_parallel/tp_comm.h"

namespace dst {

// This rank's rows of N token rows (N divides by tp: the engine checks).
inline int64_t LocalRows(const TensorParallelGroup &tp, int64_t N) {
  return tp.splits_rows() ? N / tp.size : N;
}

// The rows a rank's buffers hold for micro-batches of up to max_rows rows.
inline int64_t MaxLocalRows(const TensorParallelGroup &tp, int64_t max_rows) {
  return tp.splits_rows() ? (max_rows + tp.size - 1) / tp.size : max_rows;
}

// This rank's rows [n, width] inside a whole [N, width] buffer.
template <typename T>
T *RowsOf(const TensorParallelGroup &tp, T *whole, int64_t n, int64_t width) {
  return tp.splits_rows() ? whole + tp.rank * n * width : whole;
}

// whole [N, width] <- every rank's rows `local` [n, width]: launched.
template <typename T>
std::unique_ptr<Work> GatherRows(const Kernels<T> &k, const TensorParallelGroup &tp, const T *local,
                                 int64_t n, int64_t width, T *whole) {
  k.Copy(local, n * width, RowsOf(tp, whole, n, width));
  return TpAllGather(tp, whole, n * width);
}

// The partial sums whole [N, width] summed over the group; afterwards this
// rank's rows (RowsOf) hold its part: launched.
template <typename T>
std::unique_ptr<Work> ReduceScatterRows(const TensorParallelGroup &tp, T *whole, int64_t n,
                                        int64_t width) {
  return TpReduceScatter(tp, whole, n * width);
}

}  // namespace dst
