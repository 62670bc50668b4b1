// The CUDA plugin's launch shapes (core/kernels/cuda/launch.h), on the CPU:
// every element, row or column gets a thread or a warp (element-wise kernels
// loop over the grid stride past 65535 blocks), none is launched empty, and
// no block beyond the last is launched.
#include "core/kernels/cuda/launch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

namespace dst::cuda {
namespace {

TEST(CudaLaunch, ElementwiseCoversEveryElementThroughTheGridStride) {
  for (int64_t n :
       {int64_t(0), int64_t(1), int64_t(255), int64_t(256), int64_t(257), int64_t(1) << 20,
        int64_t(65535) * 256, int64_t(65535) * 256 + 1, int64_t(1) << 34}) {
    const Launch l = ElementwiseLaunch(n);
    EXPECT_EQ(l.threads, 256);
    EXPECT_GE(l.blocks, 1);
    EXPECT_LE(l.blocks, 65535);
    const int64_t grid = int64_t(l.blocks) * l.threads;
    if (n <= int64_t(65535) * 256) {  // one pass: no idle block beyond the last element's
      EXPECT_GE(grid, n) << n;
      EXPECT_LT(grid - l.threads, std::max<int64_t>(n, 1)) << n;
    } else {
      EXPECT_EQ(l.blocks, 65535) << n;  // the stride loop does the rest
    }
  }
}

TEST(CudaLaunch, OneWarpARowAndOneThreadAColumn) {
  for (int threads : {128, 256})
    for (int64_t rows : {int64_t(0), int64_t(1), int64_t(3), int64_t(4), int64_t(77), int64_t(4096),
                         int64_t(49153)}) {
      const Launch l = WarpPerRowLaunch(rows, threads);
      const int64_t per_block = threads / kWarp;
      EXPECT_EQ(l.threads, threads);
      EXPECT_GE(int64_t(l.blocks) * per_block, rows);
      EXPECT_TRUE(l.blocks == 1 || int64_t(l.blocks - 1) * per_block < rows) << rows;
      const Launch c = ThreadPerColumnLaunch(rows, threads);
      EXPECT_GE(int64_t(c.blocks) * threads, rows);
      EXPECT_TRUE(c.blocks == 1 || int64_t(c.blocks - 1) * threads < rows) << rows;
    }
}

TEST(CudaLaunch, ColumnChunksCoverEveryRowOnceWithinTheGridLimit) {
  for (int64_t rows : {int64_t(0), int64_t(1), int64_t(63), int64_t(64), int64_t(65), int64_t(8192),
                       int64_t(65535) * 64, int64_t(65535) * 64 + 1, int64_t(1) << 30}) {
    const ColumnChunks c = ColumnChunkLaunch(rows, 768, 256);
    EXPECT_EQ(c.column_blocks, 3);
    EXPECT_GE(c.chunks, 1);
    EXPECT_LE(c.chunks, 65535) << rows;
    EXPECT_GE(c.rows_per_chunk, 64);
    EXPECT_GE(int64_t(c.chunks) * c.rows_per_chunk, rows) << rows;  // every row in a chunk
    EXPECT_TRUE(c.chunks == 1 || int64_t(c.chunks - 1) * c.rows_per_chunk < rows) << rows;
  }
}

}  // namespace
}  // namespace dst::cuda
