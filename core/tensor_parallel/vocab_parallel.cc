#include "core/tensor_parallel/vocab_parallel.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/cpu/loss.h"
#include "core/kernels/cpu/vector_math.h"
#include "core/tensor_parallel/tp_comm.h"

namespace dst {

template <typename T>
Status VocabParallelCrossEntropy(const TensorParallelGroup &tp, T *logits, const int32_t *targets,
                                 int64_t rows, int64_t V, int64_t first, T *scratch, double *loss,
                                 int64_t *counted) {
  T *maxima = scratch;                 // [tp][rows]: every rank's row maxima
  T *sums = scratch + tp.size * rows;  // [rows] sums of exponentials | [rows] the target's
  T *target_exp = sums + rows;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T *row = logits + r * V;
    T m = row[0];
    for (int64_t j = 1; j < V; ++j) m = row[j] > m ? row[j] : m;
    maxima[tp.rank * rows + r] = m;
  }
  DST_RETURN_IF_ERROR(TpWait(TpAllGather(tp, maxima, rows), "cross-entropy row maxima"));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    T m = maxima[r];
    for (int64_t p = 1; p < tp.size; ++p) m = std::max(m, maxima[p * rows + r]);
    T *row = logits + r * V;
    sums[r] = cpu::ExpShiftedAndSum(row, V, m);  // row holds exp(logit - max) now
    const int64_t t = int64_t(targets[r]) - first;
    target_exp[r] = t >= 0 && t < V ? row[t] : T(0);
  }
  DST_RETURN_IF_ERROR(TpWait(TpAllReduce(tp, sums, 2 * rows), "cross-entropy sums"));
  double nll = 0;
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T inv = T(1) / sums[r];
    T *row = logits + r * V;
    for (int64_t j = 0; j < V; ++j) row[j] *= inv;
    if (targets[r] == cpu::kIgnoreIndex) continue;
    const double p = double(target_exp[r] * inv);  // -log p_t, floored as the plain loss is
    nll += -std::log(p > 1e-30 ? p : 1e-30);
    ++n;
  }
  *counted = n;
  *loss = n > 0 ? nll / double(n) : 0.0;
  return Status::Ok();
}

template Status VocabParallelCrossEntropy<float>(const TensorParallelGroup &, float *,
                                                 const int32_t *, int64_t, int64_t, int64_t,
                                                 float *, double *, int64_t *);
template Status VocabParallelCrossEntropy<double>(const TensorParallelGroup &, double *,
                                                  const int32_t *, int64_t, int64_t, int64_t,
                                                  double *, double *, int64_t *);

}  // namespace dst
