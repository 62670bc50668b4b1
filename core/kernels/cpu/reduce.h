// Deterministic parallel sums: the index range is cut into a fixed number of
// chunks whatever the thread count, each chunk is summed in order, and the
// chunk sums are added in order. Losses and norms are therefore bit-identical
// across runs and thread counts — needed for save/load/continue equality.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

namespace dst::cpu {

inline constexpr int64_t kReduceChunks = 64;

using ChunkSums = std::pair<double, double>;

// body(i, sum_a, sum_b) adds element i's contributions to two running sums.
template <typename Body>
ChunkSums SumOverChunks(int64_t n, Body &&body) {
  std::array<double, kReduceChunks> a{}, b{};
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < kReduceChunks; ++c) {
    const int64_t i0 = n * c / kReduceChunks, i1 = n * (c + 1) / kReduceChunks;
    double sa = 0, sb = 0;
    for (int64_t i = i0; i < i1; ++i) body(i, sa, sb);
    a[c] = sa;
    b[c] = sb;
  }
  ChunkSums total{0.0, 0.0};
  for (int64_t c = 0; c < kReduceChunks; ++c) {
    total.first += a[c];
    total.second += b[c];
  }
  return total;
}

// Sum of squares of x[0..n), accumulated in double.
template <typename T>
double SumOfSquares(const T *x, int64_t n) {
  return SumOverChunks(n, [&](int64_t i, double &s, double &) { s += double(x[i]) * x[i]; }).first;
}

}  // namespace dst::cpu
