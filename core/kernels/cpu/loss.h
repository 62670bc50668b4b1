// Losses. Each forward returns the mean loss of one micro-batch; each backward
// writes d(grad_scale * loss)/d(input), grad_scale being 1/accumulation steps.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/kernels/cpu/reduce.h"
#include "core/kernels/cpu/vector_math.h"
#include "core/kernels/elementwise_math.h"

namespace dst::cpu {

inline constexpr int32_t kIgnoreIndex = -1;

// logits: [rows, V] replaced in place by softmax probabilities (kept for the
// backward). targets: [rows] in [0, V) or kIgnoreIndex. Returns the mean
// negative log-likelihood over non-ignored rows (0 if all are ignored) and
// the count of counted rows in *counted.
template <typename T>
T SoftmaxCrossEntropyForward(T *logits, const int32_t *targets, int64_t rows, int64_t V,
                             int64_t *counted) {
  const ChunkSums sums = SumOverChunks(rows, [&](int64_t r, double &nll, double &n) {
    T *row = logits + r * V;
    T maxv = row[0];
#pragma omp simd reduction(max : maxv)
    for (int64_t j = 1; j < V; ++j) maxv = row[j] > maxv ? row[j] : maxv;
    const T sum = ExpShiftedAndSum(row, V, maxv);
    const T inv = T(1) / sum;
    for (int64_t j = 0; j < V; ++j) row[j] *= inv;
    const int32_t t = targets[r];
    if (t != kIgnoreIndex) {
      // -log p_t from the normalised probability, floored to avoid log(0).
      const T p = row[t];
      nll += -std::log(p > T(1e-30) ? double(p) : 1e-30);
      n += 1;
    }
  });
  *counted = int64_t(sums.second);
  return *counted > 0 ? T(sums.first / sums.second) : T(0);
}

// dlogits (assigns): [rows, V] = grad_scale * (p - onehot) / counted. A
// vocabulary-parallel rank holds columns [first, first + V) of the logits:
// the one-hot applies where the target is among them.
template <typename T>
void SoftmaxCrossEntropyBackward(const T *probs, const int32_t *targets, int64_t rows, int64_t V,
                                 int64_t counted, T grad_scale, T *dlogits, int64_t first = 0) {
  const T k = counted > 0 ? grad_scale / T(counted) : T(0);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T *p = probs + r * V;
    T *d = dlogits + r * V;
    const int32_t t = targets[r];
    if (t == kIgnoreIndex) {
      for (int64_t j = 0; j < V; ++j) d[j] = T(0);
      continue;
    }
    for (int64_t j = 0; j < V; ++j) d[j] = p[j] * k;
    if (t >= first && t - first < V) d[t - first] -= k;
  }
}

// Mean squared error over all elements (torch.nn.MSELoss, reduction mean).
template <typename T>
T MseForward(const T *pred, const T *labels, int64_t n) {
  const ChunkSums sums = SumOverChunks(n, [&](int64_t i, double &total, double &) {
    const double d = double(pred[i]) - double(labels[i]);
    total += d * d;
  });
  return T(sums.first / double(n));
}

// dpred = 2 grad_scale (pred - labels) / mean_over, over n elements;
// mean_over: the elements the loss averages (0: n; sequence parallelism: every
// tp rank's).
template <typename T>
void MseBackward(const T *pred, const T *labels, int64_t n, T grad_scale, T *dpred,
                 int64_t mean_over = 0) {
  const T k = T(2) * grad_scale / T(mean_over > 0 ? mean_over : n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dpred[i] = k * (pred[i] - labels[i]);
}

}  // namespace dst::cpu
