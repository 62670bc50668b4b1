// Causal attention fused FlashAttention's way, fp32 on the CUDA cores: no
// [B, H, T, T] matrix in memory. The forward keeps a running maximum and sum
// per query row (online softmax) while it walks the keys tile by tile, and
// saves only lse = max + log(sum) per row; the backward recomputes each
// probability p = exp(q.k * scale - lse) from it.
//
// One thread a row (a query row forward; query or key rows backward), its
// vectors in registers padded to kHs (16, 32, 64 or 128: the head size
// rounded up), the other side's rows in shared-memory tiles of kTile rows.
// The backward runs four passes, none with atomics, so results do not depend
// on scheduling:
//   D[i]  = dy_i . y_i                                  (one thread a row)
//   dq_i  = scale sum_{j<=i} p_ij (dy_i.v_j - D_i) k_j  (one thread a query row)
//   dk_j  = scale sum_{i>=j} p_ij (dy_i.v_j - D_i) q_i  (one thread a key row)
//   dv_j  =       sum_{i>=j} p_ij dy_i                  (one thread a key row)
// dk and dv are separate passes so a thread holds three vectors, not four.
//
// Every attention shape the layers use: grouped-query heads (query head h
// reads key/value head h / (H / kv); a key row's gradients sum over its
// group's query heads, one thread still owning the row, so no atomics),
// BLOOM's head-interleaved qkv rows (AttentionDims::Offset) and ALiBi
// (slope x key position added to every score; lse includes it, so the
// backward's recomputed probabilities do too).
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <vector>

#include "core/kernels/cuda/plugin_support.cuh"
#include "core/kernels/elementwise_math.h"
#include "core/kernels/cuda/cuda_kernel_table.h"

namespace dst::cuda {

namespace {

constexpr int kRowsPerBlock = 64;  // threads a block, one row each
constexpr int kTile = 32;          // rows of the other side a shared-memory tile holds
constexpr int kChunk = 8;          // keys scored together between online-softmax updates
constexpr int kPairChunk = 1;      // backward: rows scored together (two dot products each,
                                   // fewer registers held: three vectors live)

// Row t of one head's slice: base + t * stride (q, k or v of qkv: stride
// the row width; dy and y: stride C).
struct HeadRows {
  const float *base;
  long stride;
  __device__ const float *Row(long t) const { return base + t * stride; }
};

// Query head `head` (part 0) or key/value head `head` (parts 1, 2) of batch b.
__device__ HeadRows QkvRows(const float *qkv, const AttentionDims &s, long b, long head, int part) {
  return {qkv + b * s.T * s.width() + s.Offset(head, part), s.width()};
}
__device__ HeadRows OutRows(const float *x, const AttentionDims &s, long b, long h) {
  return {x + b * s.T * s.C + h * s.hs(), s.C};
}

// What a block of kRowsPerBlock rows of one head knows of itself (grid:
// row blocks x B * heads: query heads H, or key/value heads for the key
// passes): the head, its first row and this thread's row.
struct RowBlock {
  long bh, b, h, hs;  // h: a query head, or a key/value head (key passes)
  long first;   // the block's first row
  long row;     // this thread's
  bool active;  // row < T
  float scale;  // 1 / sqrt(hs)
  // The last key the block's query rows see (causal): its last row.
  __device__ long LastKey(const AttentionDims &s) const {
    return (first + kRowsPerBlock < s.T ? first + kRowsPerBlock : s.T) - 1;
  }
};

__device__ RowBlock ThisRowBlock(const AttentionDims &s, long heads) {
  RowBlock r;
  r.bh = blockIdx.y;
  r.b = r.bh / heads;
  r.h = r.bh % heads;
  r.hs = s.hs();
  r.first = long(blockIdx.x) * kRowsPerBlock;
  r.row = r.first + threadIdx.x;
  r.active = r.row < s.T;
  r.scale = 1.0f / sqrtf(float(r.hs));
  return r;
}

// Query head h's ALiBi slope (0 without ALiBi) and its key/value head.
__device__ float SlopeOf(const AttentionDims &s, long h) {
  return s.alibi_heads > 0 ? math::AlibiSlope(s.first_head + h, s.alibi_heads) : 0.0f;
}
__device__ long KvHeadOf(const AttentionDims &s, long h) {
  return h / (s.H / s.kv());
}

// r = row t's first hs values, zeros after (and everywhere when !active).
template <int kHs>
__device__ void LoadRow(const HeadRows &rows, long t, long hs, bool active, float (&r)[kHs]) {
#pragma unroll
  for (int d = 0; d < kHs; ++d) r[d] = active && d < hs ? rows.Row(t)[d] : 0.0f;
}

// tile[r] = row first + r (r < kTile), zeros past T and past hs. Every
// thread of the block takes part.
template <int kHs>
__device__ void LoadTile(const HeadRows &rows, long first, long T, long hs, float (*tile)[kHs]) {
  for (int i = threadIdx.x; i < kTile * kHs; i += blockDim.x) {
    const int r = i / kHs, d = i % kHs;
    tile[r][d] = first + r < T && d < hs ? rows.Row(first + r)[d] : 0.0f;
  }
}

// out[j] = a . tile[first + j] for the kRows rows from `first`, as
// independent chains of fused multiply-adds (one dot product alone is a chain
// of kHs dependent ones): a chain a row, or with fewer than four rows four
// chains a row (over d mod 4) summed at the end. Rows are read four floats
// at a time.
template <int kHs, int kRows>
__device__ void ChunkDots(const float (&a)[kHs], const float (*tile)[kHs], int first,
                          float (&out)[kRows]) {
  constexpr int kSplit = kRows >= 4 ? 1 : 4;
  float part[kRows][kSplit];
#pragma unroll
  for (int j = 0; j < kRows; ++j)
#pragma unroll
    for (int p = 0; p < kSplit; ++p) part[j][p] = 0.0f;
#pragma unroll
  for (int d = 0; d < kHs; d += 4) {
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const float4 b = *reinterpret_cast<const float4 *>(&tile[first + j][d]);
      part[j][0 % kSplit] += a[d] * b.x;
      part[j][1 % kSplit] += a[d + 1] * b.y;
      part[j][2 % kSplit] += a[d + 2] * b.z;
      part[j][3 % kSplit] += a[d + 3] * b.w;
    }
  }
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    out[j] = part[j][0];
#pragma unroll
    for (int p = 1; p < kSplit; ++p) out[j] += part[j][p];
  }
}

// y [B, T, C] and lse [B, H, T]; grid (query blocks, B * H).
template <int kHs>
__global__ void __launch_bounds__(kRowsPerBlock)
    FlashForwardKernel(const float *qkv, AttentionDims s, float *y, float *lse) {
  __shared__ __align__(16) float ks[kTile][kHs];
  __shared__ __align__(16) float vs[kTile][kHs];
  const RowBlock rb = ThisRowBlock(s, s.H);
  const long bh = rb.bh, b = rb.b, h = rb.h, hs = rb.hs, t = rb.row, g_kv = KvHeadOf(s, h);
  const bool active = rb.active;
  const float scale = rb.scale, slope = SlopeOf(s, h);
  const HeadRows k_rows = QkvRows(qkv, s, b, g_kv, 1), v_rows = QkvRows(qkv, s, b, g_kv, 2);
  float q[kHs], o[kHs];
  LoadRow(QkvRows(qkv, s, b, h, 0), t, hs, active, q);
#pragma unroll
  for (int d = 0; d < kHs; ++d) o[d] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;
  for (long first_key = 0; first_key <= rb.LastKey(s); first_key += kTile) {
    __syncthreads();
    LoadTile(k_rows, first_key, s.T, hs, ks);
    LoadTile(v_rows, first_key, s.T, hs, vs);
    __syncthreads();
    const long keys = active ? t - first_key + 1 : 0;  // this row sees keys first_key..t
    for (int c = 0; c < kTile && c < keys; c += kChunk) {
      float score[kChunk];
      ChunkDots(q, ks, c, score);
      float chunk_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        score[j] = c + j < keys ? score[j] * scale + slope * float(first_key + c + j) : -INFINITY;
        chunk_max = fmaxf(chunk_max, score[j]);
      }
      const float new_max = fmaxf(running_max, chunk_max);
      const float correction = expf(running_max - new_max);  // 0 on the first chunk
      running_sum *= correction;
#pragma unroll
      for (int d = 0; d < kHs; ++d) o[d] *= correction;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const float p = c + j < keys ? expf(score[j] - new_max) : 0.0f;
        running_sum += p;
#pragma unroll
        for (int d = 0; d < kHs; ++d) o[d] += p * vs[c + j][d];
      }
      running_max = new_max;
    }
  }
  if (!active) return;
  const float inv = 1.0f / running_sum;
  float *out = y + (b * s.T + t) * s.C + h * hs;
#pragma unroll
  for (int d = 0; d < kHs; ++d)
    if (d < hs) out[d] = o[d] * inv;
  lse[bh * s.T + t] = running_max + logf(running_sum);
}

// D [B, H, T] = dy . y per query row.
__global__ void FlashBackwardDotKernel(const float *dy, const float *y, AttentionDims s, float *D) {
  for (long row = blockIdx.x * long(blockDim.x) + threadIdx.x; row < s.rows();
       row += long(gridDim.x) * blockDim.x) {
    const long t = row % s.T, bh = row / s.T, h = bh % s.H, b = bh / s.H, hs = s.hs();
    const long at = (b * s.T + t) * s.C + h * hs;
    float sum = 0.0f;
    for (long d = 0; d < hs; ++d) sum += dy[at + d] * y[at + d];
    D[row] = sum;
  }
}

// dq (assigned into dqkv's q part); grid (query blocks, B * H).
template <int kHs>
__global__ void __launch_bounds__(kRowsPerBlock)
    FlashBackwardQueryKernel(const float *qkv, const float *dy, const float *lse, const float *D,
                             AttentionDims s, float *dqkv) {
  __shared__ __align__(16) float ks[kTile][kHs];
  __shared__ __align__(16) float vs[kTile][kHs];
  const RowBlock rb = ThisRowBlock(s, s.H);
  const long bh = rb.bh, b = rb.b, h = rb.h, hs = rb.hs, t = rb.row, g_kv = KvHeadOf(s, h);
  const bool active = rb.active;
  const float scale = rb.scale, slope = SlopeOf(s, h);
  const HeadRows k_rows = QkvRows(qkv, s, b, g_kv, 1), v_rows = QkvRows(qkv, s, b, g_kv, 2);
  float q[kHs], g[kHs], dq[kHs];
  LoadRow(QkvRows(qkv, s, b, h, 0), t, hs, active, q);
  LoadRow(OutRows(dy, s, b, h), t, hs, active, g);
#pragma unroll
  for (int d = 0; d < kHs; ++d) dq[d] = 0.0f;
  const float row_lse = active ? lse[bh * s.T + t] : 0.0f, row_d = active ? D[bh * s.T + t] : 0.0f;
  for (long first_key = 0; first_key <= rb.LastKey(s); first_key += kTile) {
    __syncthreads();
    LoadTile(k_rows, first_key, s.T, hs, ks);
    LoadTile(v_rows, first_key, s.T, hs, vs);
    __syncthreads();
    const long keys = active ? t - first_key + 1 : 0;
    for (int c = 0; c < kTile && c < keys; c += kPairChunk) {
      float score[kPairChunk], dp[kPairChunk];
      ChunkDots(q, ks, c, score);
      ChunkDots(g, vs, c, dp);
#pragma unroll
      for (int j = 0; j < kPairChunk; ++j) {
        const float key = float(first_key + c + j);
        const float ds =
            c + j < keys ? expf(score[j] * scale + slope * key - row_lse) * (dp[j] - row_d) : 0.0f;
#pragma unroll
        for (int d = 0; d < kHs; ++d) dq[d] += ds * ks[c + j][d];
      }
    }
  }
  if (!active) return;
  float *out = dqkv + (b * s.T + t) * s.width() + s.Offset(h, 0);
#pragma unroll
  for (int d = 0; d < kHs; ++d)
    if (d < hs) out[d] = dq[d] * scale;
}

// dk (kWantKey) or dv (assigned into dqkv's k or v part); one thread a key
// row of key/value head g, walking the query rows at or after it of each
// query head of g's group in turn; grid (key blocks, B * kv).
template <int kHs, bool kWantKey>
__global__ void __launch_bounds__(kRowsPerBlock)
    FlashBackwardKeyKernel(const float *qkv, const float *dy, const float *lse, const float *D,
                           AttentionDims s, float *dqkv) {
  __shared__ __align__(16) float qs[kTile][kHs];
  __shared__ __align__(16) float gs[kTile][kHs];
  __shared__ float tile_lse[kTile], tile_d[kTile];
  const RowBlock rb = ThisRowBlock(s, s.kv());  // rows are keys of key/value head rb.h here
  const long b = rb.b, g_kv = rb.h, hs = rb.hs, first_key = rb.first, j = rb.row;
  const bool active = rb.active;
  constexpr int kRows = kWantKey ? kPairChunk : kChunk;
  const float scale = rb.scale;
  float k[kHs], v[kHs], acc[kHs];
  LoadRow(QkvRows(qkv, s, b, g_kv, 1), j, hs, active, k);
  LoadRow(QkvRows(qkv, s, b, g_kv, 2), j, hs, active && kWantKey, v);
#pragma unroll
  for (int d = 0; d < kHs; ++d) acc[d] = 0.0f;
  const long group = s.H / s.kv();
  for (long h = g_kv * group; h < (g_kv + 1) * group; ++h) {
    const long bh = b * s.H + h;
    const float bias = SlopeOf(s, h) * float(j);  // ALiBi: the key's position, the same each row
    const HeadRows q_rows = QkvRows(qkv, s, b, h, 0), g_rows = OutRows(dy, s, b, h);
    for (long first_query = first_key; first_query < s.T; first_query += kTile) {
      __syncthreads();
      LoadTile(q_rows, first_query, s.T, hs, qs);
      LoadTile(g_rows, first_query, s.T, hs, gs);
      for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
        const bool in = first_query + r < s.T;
        tile_lse[r] = in ? lse[bh * s.T + first_query + r] : 0.0f;
        tile_d[r] = in ? D[bh * s.T + first_query + r] : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      for (int c = 0; c < kTile && first_query + c < s.T; c += kRows) {
        if (first_query + c + kRows - 1 < j) continue;  // every query of the chunk is before j
        float score[kRows], dp[kRows];
        ChunkDots(k, qs, c, score);
        if (kWantKey) ChunkDots(v, gs, c, dp);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const long i = first_query + c + r;
          const float p =
              i >= j && i < s.T ? expf(score[r] * scale + bias - tile_lse[c + r]) : 0.0f;
          // dk: the score gradient times q; dv: the probability times dy.
          const float w = kWantKey ? p * (dp[r] - tile_d[c + r]) : p;
          const float(&row)[kHs] = kWantKey ? qs[c + r] : gs[c + r];
#pragma unroll
          for (int d = 0; d < kHs; ++d) acc[d] += w * row[d];
        }
      }
    }
  }
  if (!active) return;
  float *out = dqkv + (b * s.T + j) * s.width() + s.Offset(g_kv, kWantKey ? 1 : 2);
#pragma unroll
  for (int d = 0; d < kHs; ++d)
    if (d < hs) out[d] = kWantKey ? acc[d] * scale : acc[d];
}

// Blocks of kRowsPerBlock rows of each of B * heads heads.
dim3 RowBlocks(const AttentionDims &s, long heads) {
  return dim3(unsigned((s.T + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(s.B * heads));
}

template <int kHs>
void LaunchForward(const float *qkv, const AttentionDims &s, float *y, float *lse,
                   cudaStream_t stream) {
  FlashForwardKernel<kHs><<<RowBlocks(s, s.H), kRowsPerBlock, 0, stream>>>(qkv, s, y, lse);
}

template <int kHs>
void LaunchBackward(const float *qkv, const float *y, const float *lse, const float *dy,
                    const AttentionDims &s, float *dqkv, float *D, cudaStream_t stream) {
  const Launch rows = ElementwiseLaunch(s.rows());
  const dim3 queries = RowBlocks(s, s.H), keys = RowBlocks(s, s.kv());
  FlashBackwardDotKernel<<<rows.blocks, rows.threads, 0, stream>>>(dy, y, s, D);
  FlashBackwardQueryKernel<kHs><<<queries, kRowsPerBlock, 0, stream>>>(qkv, dy, lse, D, s, dqkv);
  FlashBackwardKeyKernel<kHs, true><<<keys, kRowsPerBlock, 0, stream>>>(qkv, dy, lse, D, s, dqkv);
  FlashBackwardKeyKernel<kHs, false><<<keys, kRowsPerBlock, 0, stream>>>(qkv, dy, lse, D, s, dqkv);
}

// The padded head size the kernels are instantiated for, or 0 when hs is
// larger than the largest (128) or the grid cannot hold B * H.
int PaddedHeadSize(const AttentionDims &s) {
  if (!dst_cuda_fused_attention_takes(s.B, s.C, s.H)) return 0;
  const long hs = s.hs();
  return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : hs <= 128 ? 128 : 0;
}

}  // namespace

bool FlashAttentionTakes(const AttentionDims &s) {
  return PaddedHeadSize(s) != 0;
}

// cudaErrorInvalidValue when the head size is over 128 (or C % H != 0).
cudaError_t FlashAttentionForward(const float *qkv, const AttentionDims &s, float *y, float *lse,
                                  cudaStream_t stream) {
  switch (PaddedHeadSize(s)) {
    case 16:
      LaunchForward<16>(qkv, s, y, lse, stream);
      break;
    case 32:
      LaunchForward<32>(qkv, s, y, lse, stream);
      break;
    case 64:
      LaunchForward<64>(qkv, s, y, lse, stream);
      break;
    case 128:
      LaunchForward<128>(qkv, s, y, lse, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t FlashAttentionBackward(const float *qkv, const float *y, const float *lse,
                                   const float *dy, const AttentionDims &s, float *dqkv, float *D,
                                   cudaStream_t stream) {
  switch (PaddedHeadSize(s)) {
    case 16:
      LaunchBackward<16>(qkv, y, lse, dy, s, dqkv, D, stream);
      break;
    case 32:
      LaunchBackward<32>(qkv, y, lse, dy, s, dqkv, D, stream);
      break;
    case 64:
      LaunchBackward<64>(qkv, y, lse, dy, s, dqkv, D, stream);
      break;
    case 128:
      LaunchBackward<128>(qkv, y, lse, dy, s, dqkv, D, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t BenchFlashAttention(bool backward, const BenchDims &d, int iters, double *ms) {
  const AttentionDims s{d.B, d.T, d.C, d.H};
  const long BT = d.B * d.T;
  cudaError_t st = cudaSuccess;
  DeviceArray<float> qkv(nullptr, size_t(BT * 3 * d.C), &st), dy(nullptr, size_t(BT * d.C), &st),
      y(nullptr, size_t(BT * d.C), &st), lse(nullptr, size_t(s.rows()), &st),
      D(nullptr, size_t(s.rows()), &st), dqkv(nullptr, size_t(BT * 3 * d.C), &st);
  if (st == cudaSuccess) st = FillRandom(qkv.get(), BT * 3 * d.C, 1u);
  if (st == cudaSuccess) st = FillRandom(dy.get(), BT * d.C, 2u);
  if (st == cudaSuccess) st = FlashAttentionForward(qkv.get(), s, y.get(), lse.get());
  if (st != cudaSuccess) return st;
  return TimeLaunches(
      iters,
      [&] {
        if (backward)
          return FlashAttentionBackward(qkv.get(), y.get(), lse.get(), dy.get(), s, dqkv.get(),
                                        D.get());
        return FlashAttentionForward(qkv.get(), s, y.get(), lse.get());
      },
      ms);
}

}  // namespace dst::cuda

namespace cuda = dst::cuda;

namespace {

// The fused attention on host arrays for the GPU tests (device 0, copied
// back): forward (y [B, T, C], lse [B, H, T]) then backward from dy (dqkv,
// qkv's shape, assigned). Returns 0, 1 when there is no device, 2 on an
// error (err[cap]), a head size over 128 included.
int FlashOnHost(const float *qkv, const float *dy, const cuda::AttentionDims &s, float *y,
                float *lse, float *dqkv, char *err, size_t cap) {
  if (!cuda::HasDevice()) return 1;
  if (cuda::PaddedHeadSize(s) == 0 || s.kv() <= 0 || s.H % s.kv() != 0) {
    if (err != nullptr && cap > 0)
      std::snprintf(err, cap,
                    "flash attention: head size C / H = %ld / %ld with %ld key/value heads is not "
                    "supported (at most 128, C a multiple of H, H of the key/value heads, B x H "
                    "at most 65535)",
                    s.C, s.H, s.kv());
    return 2;
  }
  const size_t qkv_size = size_t(s.B * s.T * s.width()), y_size = size_t(s.B * s.T * s.C);
  cudaError_t st = cudaSuccess;
  cuda::DeviceArray<float> d_qkv(qkv, qkv_size, &st), d_dy(dy, y_size, &st),
      d_y(nullptr, y_size, &st), d_lse(nullptr, size_t(s.rows()), &st),
      d_D(nullptr, size_t(s.rows()), &st), d_dqkv(nullptr, qkv_size, &st);
  if (st == cudaSuccess) st = cuda::FlashAttentionForward(d_qkv.get(), s, d_y.get(), d_lse.get());
  if (st == cudaSuccess)
    st = cuda::FlashAttentionBackward(d_qkv.get(), d_y.get(), d_lse.get(), d_dy.get(), s,
                                      d_dqkv.get(), d_D.get());
  if (st == cudaSuccess) st = cudaDeviceSynchronize();
  d_y.CopyTo(y);
  d_lse.CopyTo(lse);
  d_dqkv.CopyTo(dqkv);
  return st == cudaSuccess ? 0 : cuda::Fail(err, cap, "flash attention", st);
}

}  // namespace

// GPT's shape (qkv [B, T, 3C]).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_flash_attention(
    const float *qkv, const float *dy, long B, long T, long C, long H, float *y, float *lse,
    float *dqkv, char *err, size_t cap) {
  return FlashOnHost(qkv, dy, cuda::AttentionDims{B, T, C, H}, y, lse, dqkv, err, cap);
}

// Any shape: grouped-query heads, BLOOM's interleaved rows, ALiBi (qkv
// [B, T, C + 2 kv hs]).
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_flash_attention_shape(
    const float *qkv, const float *dy, const DstCudaAttentionShape *shape, float *y, float *lse,
    float *dqkv, char *err, size_t cap) {
  const cuda::AttentionDims s{shape->B,        shape->T,
                              shape->C,        shape->H,
                              shape->kv_heads, shape->interleaved != 0,
                              shape->alibi_heads, shape->first_head};
  return FlashOnHost(qkv, dy, s, y, lse, dqkv, err, cap);
}
