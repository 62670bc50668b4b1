// Deterministic parallel sums: the index range is cut into a fixed number of
// chunks whatever the thread count, each chunk is summed in order, and the
// chunk sums are added in order. Losses and norms are therefore bit-identical
// across runs and thread counts — needed for save/load/continue equality.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

namespace dst::cpu {

inline constexpr int64_t kReduceChunks = 64;
// Chunks one thread sums side by side: each chunk is still one chain of
// additions in index order (the same bits), but kReduceLanes independent
// chains keep the adder busy instead of waiting on one chain's latency.
inline constexpr int64_t kReduceLanes = 4;

using ChunkSums = std::pair<double, double>;

// body(i, sum_a, sum_b) adds element i's contributions to two running sums.
template <typename Body>
ChunkSums SumOverChunks(int64_t n, Body &&body) {
  static_assert(kReduceChunks % kReduceLanes == 0);
  std::array<double, kReduceChunks> a{}, b{};
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < kReduceChunks; g += kReduceLanes) {
    int64_t begin[kReduceLanes], end[kReduceLanes], common = n;
    double sa[kReduceLanes] = {}, sb[kReduceLanes] = {};
    for (int64_t l = 0; l < kReduceLanes; ++l) {
      begin[l] = n * (g + l) / kReduceChunks;
      end[l] = n * (g + l + 1) / kReduceChunks;
      common = std::min(common, end[l] - begin[l]);
    }
    for (int64_t j = 0; j < common; ++j)
      for (int64_t l = 0; l < kReduceLanes; ++l) body(begin[l] + j, sa[l], sb[l]);
    for (int64_t l = 0; l < kReduceLanes; ++l) {
      for (int64_t i = begin[l] + common; i < end[l]; ++i) body(i, sa[l], sb[l]);
      a[size_t(g + l)] = sa[l];
      b[size_t(g + l)] = sb[l];
    }
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
