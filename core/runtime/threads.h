// The CPU thread budget: one OpenMP pool shared by our kernels and OpenBLAS
// (the OpenMP build of OpenBLAS runs single-threaded inside our parallel
// regions, so the two never oversubscribe the cores).
#pragma once

#include "core/common/status.h"

namespace dst {

// dstrain.num_threads far above the cores (more than 8 per core) would only
// make the threads fight: an error naming both numbers and the fix.
Status CheckThreadCount(int configured);
// configured > 0 wins; else DSTRAIN_NUM_THREADS, else OMP_NUM_THREADS, else
// the online cores divided among the ranks on this node (LOCAL_WORLD_SIZE).
int ResolveNumThreads(int configured);

// Sets the OpenMP and OpenBLAS thread counts for this process.
void SetNumThreads(int threads);

// Threads our parallel regions may use now.
int MaxThreads();

}  // namespace dst
