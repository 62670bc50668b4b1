#include "core/tensor_parallel/vocab_parallel.h"

#include "core/tensor_parallel/tp_comm.h"

namespace dst {

template <typename T>
Status VocabParallelCrossEntropy(const Kernels<T> &k, const TensorParallelGroup &tp, T *logits,
                                 const int32_t *targets, int64_t rows, int64_t V, int64_t first,
                                 T *scratch, double *loss, int64_t *counted, double *loss_sum) {
  T *maxima = scratch;                 // [tp][rows]: every rank's row maxima
  T *sums = scratch + tp.size * rows;  // [rows] sums of exponentials | [rows] the target's
  T *target_exp = sums + rows;
  k.RowMaxima(logits, rows, V, maxima + tp.rank * rows);
  DST_RETURN_IF_ERROR(TpWait(tp, TpAllGather(tp, maxima, rows), "cross-entropy row maxima"));
  k.ExpAndSums(logits, rows, V, maxima, tp.size, targets, first, sums, target_exp);
  DST_RETURN_IF_ERROR(TpWait(tp, TpAllReduce(tp, sums, 2 * rows), "cross-entropy sums"));
  if (loss_sum)
    k.NormalizeAndNllInto(logits, rows, V, sums, target_exp, targets, loss_sum);
  else
    *loss = k.NormalizeAndNll(logits, rows, V, sums, target_exp, targets, counted);
  return Status::Ok();
}

template Status VocabParallelCrossEntropy<float>(const Kernels<float> &,
                                                 const TensorParallelGroup &, float *,
                                                 const int32_t *, int64_t, int64_t, int64_t,
                                                 float *, double *, int64_t *, double *);
template Status VocabParallelCrossEntropy<double>(const Kernels<double> &,
                                                  const TensorParallelGroup &, double *,
                                                  const int32_t *, int64_t, int64_t, int64_t,
                                                  double *, double *, int64_t *, double *);

}  // namespace dst
