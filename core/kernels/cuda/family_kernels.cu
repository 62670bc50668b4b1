// The LLaMA and BLOOM families' CUDA kernels, over the formulas the CPU
// kernels share (elementwise_math.h: the SiLU, rotary frequencies, ALiBi
// slopes): RMSNorm (cpu/rmsnorm.h's math, one warp a row; the weight's
// gradient in two fixed-order passes, as LayerNorm's), rotary embeddings in
// place on a packed qkv tensor (cpu/rotary.h), and the SiLU gate. Launched by
// the kernel backend (device_kernels.cu) on its stream.
#include "core/kernels/cuda/kernels.cuh"

namespace dst::cuda {

__global__ void RmsNormForwardKernel(const float *x, const float *w, long rows, long C, float eps,
                                     float *out, float *rstd) {
  const long row = blockIdx.x * long(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float *xr = x + row * C;
  float squares = 0;
  for (long i = lane; i < C; i += kWarp) squares += xr[i] * xr[i];
  const float s = 1.0f / sqrtf(WarpSum(squares) / float(C) + eps);
  float *o = out + row * C;
  for (long i = lane; i < C; i += kWarp) o[i] = w[i] * (xr[i] * s);
  if (lane == 0) rstd[row] = s;
}

__global__ void RmsNormInputGradKernel(const float *dy, const float *x, const float *w,
                                       const float *rstd, long rows, long C, float *dx) {
  const long row = blockIdx.x * long(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float *xr = x + row * C, *g = dy + row * C;
  const float s = rstd[row];
  float dot = 0;
  for (long i = lane; i < C; i += kWarp) dot += g[i] * w[i] * (xr[i] * s);
  dot = WarpSum(dot) / float(C);
  float *dxr = dx + row * C;
  for (long i = lane; i < C; i += kWarp) dxr[i] += (g[i] * w[i] - xr[i] * s * dot) * s;
}

// The weight's gradient, pass 1: partial [chunks, C] = the sums over chunk
// blockIdx.y's rows of dy x rstd, one thread a column.
__global__ void RmsNormParamGradPartialKernel(const float *dy, const float *x, const float *rstd,
                                              long rows, long C, long rows_per_chunk,
                                              float *partial) {
  const long col = blockIdx.x * long(blockDim.x) + threadIdx.x;
  if (col >= C) return;
  const long first = blockIdx.y * rows_per_chunk;
  const long last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float sum = 0;
  for (long r = first; r < last; ++r) sum += dy[r * C + col] * (x[r * C + col] * rstd[r]);
  partial[blockIdx.y * C + col] = sum;
}

// Pass 2: dw (+=) [C] = the chunks' partials in chunk order.
__global__ void RmsNormParamGradSumKernel(const float *partial, long chunks, long C, float *dw) {
  const long col = blockIdx.x * long(blockDim.x) + threadIdx.x;
  if (col >= C) return;
  float sum = 0;
  for (long k = 0; k < chunks; ++k) sum += partial[k * C + col];
  dw[col] += sum;
}

size_t RmsNormParamGradScratch(long rows, long C) {
  return size_t(ColumnChunkLaunch(rows, C, 256).chunks) * size_t(C);
}

void LaunchRmsNormParamGrad(const float *dy, const float *x, const float *rstd, long rows, long C,
                            float *dw, float *scratch, cudaStream_t stream) {
  const ColumnChunks c = ColumnChunkLaunch(rows, C, 256);
  RmsNormParamGradPartialKernel<<<dim3(unsigned(c.column_blocks), unsigned(c.chunks)), c.threads, 0,
                                  stream>>>(dy, x, rstd, rows, C, c.rows_per_chunk, scratch);
  RmsNormParamGradSumKernel<<<c.column_blocks, c.threads, 0, stream>>>(scratch, c.chunks, C, dw);
}

// One thread a rotary pair i of one head of one row: the query heads, then
// the key heads, rotated by the row's position (sign -1: the opposite angle).
__global__ void RotaryKernel(float *qkv, AttentionDims s, math::RopeParams rope, float sign) {
  const long hs = s.hs(), half = hs / 2, heads = s.H + s.kv();
  const long total = s.B * s.T * heads * half;
  for (long idx = blockIdx.x * long(blockDim.x) + threadIdx.x; idx < total;
       idx += long(gridDim.x) * blockDim.x) {
    const long i = idx % half, head = (idx / half) % heads, r = idx / (half * heads);
    const long t = r % s.T;
    const long offset = head < s.H ? s.Offset(head, 0) : s.Offset(head - s.H, 1);
    const float angle = float(t) * math::RopeInvFreq(rope, i, hs);
    const float c = cosf(angle), sn = sign * sinf(angle);
    float *x = qkv + r * s.width() + offset;
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * sn;
    x[i + half] = b * c + a * sn;
  }
}

__global__ void SiluMulForwardKernel(const float *gate, const float *up, long n, float *out) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x)
    out[i] = math::Silu(gate[i]) * up[i];
}

__global__ void SiluMulBackwardKernel(const float *dout, const float *gate, const float *up, long n,
                                      float *dgate, float *dup) {
  for (long i = blockIdx.x * long(blockDim.x) + threadIdx.x; i < n;
       i += long(gridDim.x) * blockDim.x) {
    const float g = gate[i], u = up[i], d = dout[i];
    dgate[i] = d * u * math::SiluGrad(g);
    dup[i] = d * math::Silu(g);
  }
}

}  // namespace dst::cuda
