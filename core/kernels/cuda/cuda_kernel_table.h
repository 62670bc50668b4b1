/* The CUDA kernel backend's calls, as the CUDA plugin (libdstrain_cuda.so,
 * core/kernels/cuda/device_kernels.cu) exports them: a table of plain C
 * function pointers filled by dst_cuda_plugin_kernels(), behind
 * core/device/cuda_kernels.h's Kernels<float>. Every pointer is device
 * memory of the context's device; every kernel is queued on the context's
 * stream (the host does not wait) except where a result comes back to the
 * host (the losses' plain forwards), which waits for the stream. Each call returns 0 or an
 * error code that error_string names (CUDA's cudaError_t values, and
 * DST_CUDA_BLAS_ERROR + a cuBLAS status). The table grows at the end only.
 *
 * Sizes and conventions are core/kernels/kernels.h's: inputs, sizes,
 * outputs; row-major; "+=" where the CPU kernel accumulates. `compute` is a
 * DST_CUDA_COMPUTE_* value. */
#ifndef DSTRAIN_CORE_RUNTIME_CUDA_KERNEL_TABLE_H_
#define DSTRAIN_CORE_RUNTIME_CUDA_KERNEL_TABLE_H_

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DST_CUDA_BLAS_ERROR 100000 /* + cublasStatus_t */

#define DST_CUDA_COMPUTE_FP32 0 /* fp32 operands, fp32 accumulation */
#define DST_CUDA_COMPUTE_BF16 1 /* operands rounded to bf16, fp32 accumulation and result */

#define DST_CUDA_HALF_FP16 0 /* the 16-bit formats of the activation stash */
#define DST_CUDA_HALF_BF16 1

/* One Adam/AdamW step's float constants (dst::math::AdamConstants, field for
 * field): g' = g grad_mul + l2 p; m = b1 m + omb1 g'; v = b2 v + omb2 g'^2;
 * p = p decay - step_size m / (sqrt(v) / bias2_sqrt + eps). */
typedef struct DstCudaAdamConstants {
  float b1, omb1, b2, omb2, bias2_sqrt, step_size, decay, l2, eps, grad_mul;
} DstCudaAdamConstants;

/* One SGD step's constants (dst::math::SgdElement); damp = 1 - dampening. */
typedef struct DstCudaSgdConstants {
  float lr, momentum, damp, weight_decay;
  int nesterov, first_step;
} DstCudaSgdConstants;

/* An attention's shape beyond GPT-2's (AttentionShape, core/kernels/kernels.h):
 * C = H x hs the query heads' width; kv_heads key/value heads (grouped-query);
 * interleaved: BLOOM's [head: q k v] rows; ALiBi slopes over alibi_heads heads
 * from first_head (0: none). */
typedef struct DstCudaAttentionShape {
  long B, T, C, H;
  long kv_heads;
  int interleaved;
  long alibi_heads, first_head;
} DstCudaAttentionShape;

/* Rotary embeddings' frequencies (dst::math::RopeParams, field for field). */
typedef struct DstCudaRope {
  float theta;
  int scaling;
  float factor, low_freq_factor, high_freq_factor, original_max_position;
} DstCudaRope;

typedef struct DstCudaKernelTable {
  size_t size; /* sizeof the table the plugin filled (a newer caller reads no further) */
  /* A context: the device, the stream (a cudaStream_t the caller owns), a
   * cuBLASLt handle, GEMM plans per shape and the kernels' workspaces (grown
   * on first use, then reused: a repeated step allocates nothing). */
  int (*context_create)(int device, void *stream, void **ctx);
  int (*context_destroy)(void *ctx);
  const char *(*error_string)(int code);

  /* memory (bytes) */
  int (*copy_rows)(void *ctx, const void *src, size_t src_pitch, size_t rows, size_t width,
                   void *dst, size_t dst_pitch);
  int (*zero)(void *ctx, void *dst, size_t bytes);

  /* 16-bit activations */
  int (*round_to_16)(void *ctx, int half, float *x, long n);
  int (*stash_to_16)(void *ctx, int half, float *x, long n, uint16_t *stash);
  int (*unstash_from_16)(void *ctx, int half, const uint16_t *stash, long n, float *x);

  /* element-wise */
  int (*add)(void *ctx, const float *a, const float *b, long n, float *out);
  int (*add_in_place)(void *ctx, const float *x, long n, float *y);
  int (*add_bias_to_rows)(void *ctx, const float *bias, long rows, long out, float *y);
  int (*gelu_forward)(void *ctx, const float *x, long n, float *out);
  int (*gelu_backward)(void *ctx, const float *dout, const float *x, long n, float *dx);
  int (*relu_forward)(void *ctx, const float *x, long n, float *out);
  int (*relu_backward)(void *ctx, const float *dout, const float *x, long n, float *dx);

  /* linear, W [out, in] */
  int (*linear_forward)(void *ctx, const float *x, const float *weight, const float *bias,
                        long rows, long in, long out, float *y, int compute);
  /* dx [rows, in] = dy W (assigns) */
  int (*linear_input_backward)(void *ctx, const float *dy, const float *weight, long rows, long in,
                               long out, float *dx, int compute);
  /* dweight += dy^T x; dbias (if non-null) += column sums of dy */
  int (*linear_weight_backward)(void *ctx, const float *dy, const float *x, long rows, long in,
                                long out, float *dweight, float *dbias, int compute);

  /* LayerNorm (eps 1e-5) */
  int (*layernorm_forward)(void *ctx, const float *x, const float *weight, const float *bias,
                           long rows, long C, float *out, float *mean, float *rstd);
  /* dx (if non-null) += the input gradient; dweight, dbias (if non-null) += theirs */
  int (*layernorm_backward)(void *ctx, const float *dout, const float *x, const float *weight,
                            const float *mean, const float *rstd, long rows, long C, float *dx,
                            float *dweight, float *dbias);

  /* causal attention: qkv [B, T, 3C], att [B, H, T, T], y [B, T, C] */
  int (*attention_forward)(void *ctx, const float *qkv, long B, long T, long C, long H, float *att,
                           float *y);
  int (*attention_backward)(void *ctx, const float *dy, const float *qkv, const float *att, long B,
                            long T, long C, long H, float *dqkv);

  /* embeddings */
  int (*embedding_lookup)(void *ctx, const int32_t *tokens, const float *wte, long first, long rows,
                          long B, long T, long C, float *out);
  int (*add_positions_to_rows)(void *ctx, const float *wpe, long first_row, long rows, long T,
                               long C, float *out);
  int (*embedding_backward)(void *ctx, const float *dout, const int32_t *tokens, long B, long T,
                            long C, float *dwte, float *dwpe, long first, long rows);

  /* losses; the forward ones wait for the stream and write host scalars */
  int (*cross_entropy_forward)(void *ctx, float *logits, const int32_t *targets, long rows, long V,
                               double *loss, long *counted);
  int (*cross_entropy_backward)(void *ctx, const float *probs, const int32_t *targets, long rows,
                                long V, long counted, float grad_scale, float *dlogits, long first);
  int (*row_maxima)(void *ctx, const float *logits, long rows, long V, float *maxima);
  int (*exp_and_sums)(void *ctx, float *logits, long rows, long V, const float *maxima, long parts,
                      const int32_t *targets, long first, float *sums, float *target_exp);
  int (*normalize_and_nll)(void *ctx, float *logits, long rows, long V, const float *sums,
                           const float *target_exp, const int32_t *targets, double *loss,
                           long *counted);
  int (*mse_forward)(void *ctx, const float *pred, const float *labels, long n, double *loss);
  int (*mse_backward)(void *ctx, const float *pred, const float *labels, long n, float grad_scale,
                      float *dpred, long mean_over);

  /* The step backend's calls (core/kernels/step_kernels.h) over flat fp32
   * ranges. sum_of_squares waits for the stream (the norm comes back). */
  int (*scale)(void *ctx, float k, long n, float *x);
  int (*sum_of_squares)(void *ctx, const float *x, long n, double *sum);
  int (*adam)(void *ctx, float *param, const float *grad, float *exp_avg, float *exp_avg_sq, long n,
              const DstCudaAdamConstants *k, uint16_t *half_out, int half);
  int (*sgd)(void *ctx, const float *grad, long n, const DstCudaSgdConstants *k, float *param,
             float *momentum);
  /* 16-bit storage (half: DST_CUDA_HALF_*): dst = src rounded; acc =
   * round(acc + add); acc += float(add); acc = round(acc + add) over 16-bit
   * operands; the sum of squares in double (waits). */
  int (*narrow_16)(void *ctx, int half, const float *src, long n, uint16_t *dst);
  int (*add_into_16)(void *ctx, int half, const float *add, long n, uint16_t *acc);
  int (*add_wide_16)(void *ctx, int half, const uint16_t *add, long n, float *acc);
  int (*sum_16)(void *ctx, int half, const uint16_t *add, long n, uint16_t *acc);
  int (*sum_of_squares_16)(void *ctx, int half, const uint16_t *x, long n, double *sum);
  /* x [rows, width]: columns [begin, width) of every row set to value (a
   * padded vocabulary's logits). */
  int (*fill_columns)(void *ctx, float *x, long rows, long width, long begin, float value);
  /* LLaMA / BLOOM: RMSNorm (rstd saved; dx +=, dweight += where non-null),
   * rotary embeddings in place on qkv [B, T, W] (inverse: the backward), the
   * SiLU gate, and attention in the general shape (one warp a query row,
   * the probabilities saved: no fused path). */
  int (*rmsnorm_forward)(void *ctx, const float *x, const float *weight, long rows, long C,
                         float eps, float *out, float *rstd);
  int (*rmsnorm_backward)(void *ctx, const float *dout, const float *x, const float *weight,
                          const float *rstd, long rows, long C, float *dx, float *dweight);
  int (*rotary)(void *ctx, float *qkv, const DstCudaAttentionShape *s, const DstCudaRope *rope,
                int inverse);
  int (*silu_mul_forward)(void *ctx, const float *gate, const float *up, long n, float *out);
  int (*silu_mul_backward)(void *ctx, const float *dout, const float *gate, const float *up, long n,
                           float *dgate, float *dup);
  int (*attention_forward_general)(void *ctx, const float *qkv, const DstCudaAttentionShape *s,
                                   float *att, float *y);
  int (*attention_backward_general)(void *ctx, const float *dy, const float *qkv,
                                    const float *att, const DstCudaAttentionShape *s, float *dqkv);
  /* The two loss forwards with the host not waiting: the mean over the
   * counted rows added to *loss_sum (one double of device memory). */
  int (*cross_entropy_forward_into)(void *ctx, float *logits, const int32_t *targets, long rows,
                                    long V, double *loss_sum);
  int (*normalize_and_nll_into)(void *ctx, float *logits, long rows, long V, const float *sums,
                                const float *target_exp, const int32_t *targets, double *loss_sum);
  /* The attention entries take the batched-GEMM path for GPT-2's head layout
   * from now on (enabled != 0; dst_cuda_gemm_attention_for), else the fused
   * kernel where it takes the shape. Off when the context is made. */
  int (*set_attention_gemm)(void *ctx, int enabled);
  /* The general attention entries with the layer's compute type: with
   * DST_CUDA_COMPUTE_BF16 the batched-GEMM path's products read bf16 copies
   * of q, k, v, P and (backward) dy and the score gradient, as the CPU's bf16
   * attention does; the other paths compute in fp32 either way. */
  int (*attention_forward_compute)(void *ctx, const float *qkv, const DstCudaAttentionShape *s,
                                   float *att, float *y, int compute);
  int (*attention_backward_compute)(void *ctx, const float *dy, const float *qkv, const float *att,
                                    const DstCudaAttentionShape *s, float *dqkv, int compute);
} DstCudaKernelTable;

/* Whether the attention entries take the fused kernel (online softmax, no
 * B x H x T x T probabilities written or read) for this shape: a head size
 * C / H of at most 128 and B x H at most 65535 (one grid dimension). The
 * host side sizes the saved activations by it; the plugin dispatches by it. */
static inline int dst_cuda_fused_attention_takes(long B, long C, long H) {
  return H > 0 && C % H == 0 && C / H <= 128 && B * H <= 65535;
}

/* Whether the attention entries should take the batched-GEMM path
 * (attention_gemm.cu: cuBLASLt products over the heads, the B x H x T x T
 * probabilities kept in `att` as the CPU keeps them; at GPT-2 124M's shapes
 * on an H200, 1.17 + 2.22 ms a layer's forward + backward against the fused
 * kernel's 2.44 + 7.22, which its backward's recomputation adds to) for a
 * model whose largest micro-batch has shape *s: GPT-2's head layout (a
 * key/value head per query head, q | k | v blocks, no ALiBi) whose
 * probabilities take at most DST_CUDA_GEMM_ATTENTION_MAX_BYTES a layer.
 * DSTRAIN_CUDA_ATTENTION picks: "fused" never, "gemm" whatever the size (the
 * layout still decides), "auto" or unset by the rule
 * (dst_cuda_attention_choice_valid names any other value). The host decides
 * once, for the largest shape, and tells the plugin (set_attention_gemm): a
 * smaller micro-batch must not change what the saved activations hold. */
#define DST_CUDA_GEMM_ATTENTION_MAX_BYTES (1LL << 30)
static inline int dst_cuda_attention_choice_valid(void) {
  const char *pick = getenv("DSTRAIN_CUDA_ATTENTION");
  return pick == NULL || strcmp(pick, "auto") == 0 || strcmp(pick, "fused") == 0 ||
         strcmp(pick, "gemm") == 0;
}
static inline int dst_cuda_attention_plain(const DstCudaAttentionShape *s) {
  return s->H > 0 && s->C % s->H == 0 && (s->kv_heads == 0 || s->kv_heads == s->H) &&
         !s->interleaved && s->alibi_heads == 0;
}
static inline int dst_cuda_gemm_attention_for(const DstCudaAttentionShape *largest) {
  const char *pick = getenv("DSTRAIN_CUDA_ATTENTION");
  if (!dst_cuda_attention_plain(largest) || (pick != NULL && strcmp(pick, "fused") == 0)) return 0;
  if (pick != NULL && strcmp(pick, "gemm") == 0) return 1;
  return (long long)largest->B * largest->H * largest->T * largest->T * (long long)sizeof(float) <=
         DST_CUDA_GEMM_ATTENTION_MAX_BYTES;
}

/* Whether the attention's forward leaves the probabilities in `att` for
 * shape *s, the GEMM path enabled or not: the host sizes the saved
 * activations by it, the plugin dispatches by it. */
static inline int dst_cuda_attention_keeps_probabilities(const DstCudaAttentionShape *s,
                                                         int gemm_enabled) {
  return (gemm_enabled && dst_cuda_attention_plain(s)) ||
         !dst_cuda_fused_attention_takes(s->B, s->C, s->H);
}

/* Fills *table (table->size set by the caller to sizeof its table); returns 0. */
typedef int (*DstCudaKernelsFn)(DstCudaKernelTable *table);

#ifdef __cplusplus
}
#endif

#endif /* DSTRAIN_CORE_RUNTIME_CUDA_KERNEL_TABLE_H_ */
