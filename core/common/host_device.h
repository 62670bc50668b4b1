// DST_HOST_DEVICE marks a plain inline function that both the CPU code and
// the CUDA kernels compile (the same formula on both sides).
#pragma once

#if defined(__CUDACC__)
#define DST_HOST_DEVICE __host__ __device__
#else
#define DST_HOST_DEVICE
#endif
