// Launch shapes of the CUDA plugin's kernels: host-only C++, shared by the
// plugin and the CPU unit tests (tests/unit/test_cuda_launch.cc), which check
// that each shape covers its work exactly once.
#pragma once

#include <cstdint>

namespace dst::cuda {

constexpr int kWarp = 32;

struct Launch {
  int blocks, threads;
};

// An element-wise kernel over n elements: 256 threads a block, ceil(n / 256)
// blocks, at least 1 and at most 65535 (the kernels' grid-stride loops take
// the rest).
inline Launch ElementwiseLaunch(int64_t n) {
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return {int(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535), kThreads};
}

// One warp a row (LayerNorm, attention's query rows): `threads` a block (a
// multiple of the warp), enough blocks that every row has its warp.
inline Launch WarpPerRowLaunch(int64_t rows, int threads) {
  const int64_t rows_per_block = threads / kWarp;
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  return {int(blocks > 0 ? blocks : 1), threads};
}

// One thread a column (LayerNorm's parameter gradients).
inline Launch ThreadPerColumnLaunch(int64_t columns, int threads) {
  const int64_t blocks = (columns + threads - 1) / threads;
  return {int(blocks > 0 ? blocks : 1), threads};
}

// A column reduction over many rows in two fixed-order passes (LayerNorm's
// parameter gradients): the rows split into `chunks` of rows_per_chunk, one
// thread a column of a chunk (grid: column_blocks x chunks), then one thread
// a column sums the chunks' partials in order. At least 64 rows a chunk, and
// no more chunks than a grid's y dimension holds (65535).
struct ColumnChunks {
  int column_blocks, chunks, threads;
  int64_t rows_per_chunk;
};

inline ColumnChunks ColumnChunkLaunch(int64_t rows, int64_t columns, int threads) {
  constexpr int64_t kMinRows = 64, kMaxChunks = 65535;
  int64_t per_chunk = (rows + kMaxChunks - 1) / kMaxChunks;
  if (per_chunk < kMinRows) per_chunk = kMinRows;
  const int64_t chunks = (rows + per_chunk - 1) / per_chunk;
  return {ThreadPerColumnLaunch(columns, threads).blocks, int(chunks > 0 ? chunks : 1), threads,
          per_chunk};
}

}  // namespace dst::cuda
