// Megatron's vocabulary-parallel cross-entropy: each tensor-parallel rank
// holds the logits of its vocabulary rows [first, first + V) (the tied LM
// head multiplies by its own shard of the token embedding), and the softmax
// over the whole vocabulary is assembled from per-row statistics: every
// rank's row maxima (one all-gather), then the sums of exponentials and the
// target's exponential (one all-reduce of 2 x rows). The backward is local.
#pragma once

#include <cstdint>

#include "core/common/status.h"
#include "core/kernels/kernels.h"
#include "core/tensor_parallel/tp_group.h"

namespace dst {

// logits: [rows, V], this rank's columns, replaced by the global softmax
// probabilities of those columns. targets: [rows] in [0, tp x V) or -1
// (ignored). scratch: at least (tp + 2) x rows elements. *loss: the mean
// negative log-likelihood over counted rows (the same on every rank);
// *counted: the rows not ignored. With `loss_sum` (one double where the
// kernels run) the mean is added there instead and *loss, *counted are left
// alone (MicroBatch::loss_sum).
// The three passes run as kernels of `k` (kernels.h).
template <typename T>
Status VocabParallelCrossEntropy(const Kernels<T> &k, const TensorParallelGroup &tp, T *logits,
                                 const int32_t *targets, int64_t rows, int64_t V, int64_t first,
                                 T *scratch, double *loss, int64_t *counted,
                                 double *loss_sum = nullptr);

}  // namespace dst
