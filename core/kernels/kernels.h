// The kernel backend: every computation a layer runs on its tensors, and
// every copy or fill of them, goes through one Kernels object (the layers see
// it as MicroBatch::kernels). The pointers a layer passes live where the
// backend computes — host memory for the CPU backend, device memory for a GPU
// one — so a layer never reads or writes a tensor itself: it says which
// kernel runs on which tensors, and the backend runs it. The CPU backend
// (cpu/cpu_kernels.h) forwards to the dst::cpu kernels.
//
// Conventions, as in the cpu:: kernels: inputs first, then sizes, then
// outputs; row-major tensors with their shapes in the comments; "+=" marks
// an output that accumulates, everything else assigns. `compute` is what a
// GEMM multiplies in (compute_type.h), apart from what T stores.
#pragma once

#include <cstdint>

#include "core/common/status.h"
#include "core/kernels/compute_type.h"
#include "core/kernels/elementwise_math.h"
#include "core/precision/half_ops.h"

namespace dst {

// The target value the losses ignore (every backend's).
inline constexpr int32_t kIgnoredTarget = -1;

// Causal multi-head self-attention over B sequences of T tokens: H query
// heads of hs values, C = H x hs. Each row of the qkv tensor the attention
// reads holds the query, key and value heads in one of two layouts:
//   blocked (GPT-2, LLaMA)  [q heads (H hs) | k heads (kv hs) | v heads (kv hs)]
//   interleaved (BLOOM)     [head 0: q k v | head 1: q k v | ...] (kv = H)
// Grouped-query attention (LLaMA 2/3, Mistral): kv key/value heads, query
// head h reading key/value head h / (H / kv); kv = 1 is multi-query.
// ALiBi (BLOOM): each score of head h gets slope(first_head + h,
// alibi_heads) x the key's position added before the softmax (first_head:
// a tensor-parallel rank's first head among all alibi_heads).
// Generation's key/value cache of one attention layer: the keys and values
// of every position decoded so far, k and v [B, kv heads, capacity, head
// size] each (a rank's heads), for a batch of B sequences.
template <typename T>
struct KvCacheView {
  T *k = nullptr, *v = nullptr;
  int64_t capacity = 0;
};

struct AttentionShape {
  int64_t B, T, C, H;
  int64_t kv_heads = 0;  // 0: H (one key/value head per query head)
  bool interleaved = false;
  int64_t alibi_heads = 0;  // 0: no ALiBi
  int64_t first_head = 0;
  // The position of each sequence's first row (generation over a key/value
  // cache: rows [position, position + T)); rotary embeddings rotate row t by
  // position + t. Training: 0.
  int64_t position = 0;
  int64_t head_size() const { return C / H; }
  int64_t kv() const { return kv_heads > 0 ? kv_heads : H; }
  // Query heads per key/value head, and the key/value head of query head h.
  int64_t group_size() const { return H / kv(); }
  int64_t group(int64_t h) const { return h / group_size(); }
  // Values in a row of qkv, and where each head starts in it.
  int64_t width() const { return C + 2 * kv() * head_size(); }
  int64_t q_offset(int64_t h) const { return interleaved ? 3 * h * head_size() : h * head_size(); }
  int64_t k_offset(int64_t g) const {
    return interleaved ? (3 * g + 1) * head_size() : C + g * head_size();
  }
  int64_t v_offset(int64_t g) const {
    return interleaved ? (3 * g + 2) * head_size() : C + (kv() + g) * head_size();
  }
  // Whether this is GPT-2's attention (blocked, one key/value head per query
  // head, no ALiBi): the layout every backend computes.
  bool plain() const { return kv() == H && !interleaved && alibi_heads == 0; }
};

template <typename T>
class Kernels {
 public:
  virtual ~Kernels() = default;
  // Where the tensors live and the kernels run ("cpu", "cuda:0").
  virtual const char *name() const = 0;
  // The first kernel failure since the last call, then cleared: a device
  // backend's kernels fail apart from the layer that queued them (the
  // layers' calls return nothing), so the model asks after each layer pass.
  // The CPU backend's kernels do not fail.
  virtual Status TakeError() const { return Status::Ok(); }

  // ---- memory
  // dst [n] = src [n].
  virtual void Copy(const T *src, int64_t n, T *dst) const = 0;
  // rows x width elements from src (rows `src_stride` apart) to dst (rows
  // `dst_stride` apart): a column block of a matrix, cudaMemcpy2D's shape.
  virtual void CopyRows(const T *src, int64_t src_stride, int64_t rows, int64_t width, T *dst,
                        int64_t dst_stride) const = 0;
  // dst [n] = 0.
  virtual void Zero(int64_t n, T *dst) const = 0;
  // x [rows, width]: columns [begin, width) of every row set to `value` (a
  // padded vocabulary's logits: -inf before the softmax, 0 after).
  virtual void FillColumns(T *x, int64_t rows, int64_t width, int64_t begin, T value) const = 0;

  // ---- 16-bit activations (the activation store's stash; `half` the format)
  // x [n] rounded onto the 16-bit grid in place.
  virtual void RoundTo16(Half half, T *x, int64_t n) const = 0;
  // stash [n] = x in 16 bits, and x rounded the same way (one pass).
  virtual void StashTo16(Half half, T *x, int64_t n, uint16_t *stash) const = 0;
  // x [n] = stash [n] widened.
  virtual void UnstashFrom16(Half half, const uint16_t *stash, int64_t n, T *x) const = 0;

  // ---- element-wise
  virtual void Add(const T *a, const T *b, int64_t n, T *out) const = 0;  // out = a + b
  virtual void AddInPlace(const T *x, int64_t n, T *y) const = 0;         // y += x
  // y [rows, out] += bias [out] on every row.
  virtual void AddBiasToRows(const T *bias, int64_t rows, int64_t out, T *y) const = 0;
  virtual void GeluForward(const T *x, int64_t n, T *out) const = 0;  // tanh approximation
  // GeluForward given also where out's and x's bf16 copies go (out16, x16
  // [n], each may be null). A backend that keeps bf16 copies
  // (KeepsBf16Copies) writes out and x rounded there, and takes out null when
  // only out's copy is wanted (LayerActivations::Bf16Only); x16 is what
  // GeluBackwardStashed reads. By default neither copy is written.
  virtual void GeluForwardStashing(const T *x, int64_t n, T *out, uint16_t *out16,
                                   uint16_t *x16) const {
    (void)out16, (void)x16;
    GeluForward(x, n, out);
  }
  virtual void GeluBackward(const T *dout, const T *x, int64_t n, T *dx) const = 0;
  // GeluBackward given also x16, x's bf16 copy (may be null), which a backend
  // that keeps bf16 copies reads instead of x (then x may be null: the
  // forward's x was rounded, and only the copy is kept). By default x16 is
  // not read.
  virtual void GeluBackwardStashed(const T *dout, const T *x, const uint16_t *x16, int64_t n,
                                   T *dx) const {
    (void)x16;
    GeluBackward(dout, x, n, dx);
  }
  // A GELU's backward feeding the linear before it (an MLP's first linear):
  // GeluBackwardStashed of dout [rows, out] with the GELU's input gx (and
  // its copy gx16), then LinearBackwardStashed with that gradient as dy. A
  // backend multiplying in bf16 may round the GELU's gradient as it computes
  // it and never write it: dout's contents are unspecified after.
  virtual void GeluLinearBackwardStashed(T *dout, const T *gx, const uint16_t *gx16, const T *x,
                                         const uint16_t *x16, const T *weight,
                                         const uint16_t *weight16, int64_t rows, int64_t in,
                                         int64_t out, T *dx, T *dweight, T *dbias,
                                         ComputeType compute) const {
    GeluBackwardStashed(dout, gx, gx16, rows * out, dout);
    LinearBackwardStashed(dout, x, x16, weight, weight16, rows, in, out, dx, dweight, dbias,
                          compute);
  }
  virtual void ReluForward(const T *x, int64_t n, T *out) const = 0;
  virtual void ReluBackward(const T *dout, const T *x, int64_t n, T *dx) const = 0;

  // ---- linear: y = x W^T + b, W [out, in] (nn.Linear)
  // x [rows, in], bias [out] or null -> y [rows, out].
  virtual void LinearForward(const T *x, const T *weight, const T *bias, int64_t rows, int64_t in,
                             int64_t out, T *y, ComputeType compute) const = 0;
  // Whether this backend's bf16 GEMMs write and read the bf16 copies the
  // *Stashing / *Stashed forms below are given (the CPU's: yes). By default
  // the copies are neither written nor read.
  virtual bool KeepsBf16Copies() const { return false; }
  // LinearForward given also where x's bf16 copy goes (x16 [rows, in], may be
  // null): a backend that keeps bf16 copies and multiplies in bf16 writes x
  // rounded to bf16 there, the operand its GEMM reads. It takes x null when
  // x16 already holds that operand (a producer wrote only the bf16 copy).
  // weight16: the weight's bf16 copy (ParamStore::param16: the same values),
  // which such a backend reads instead of rounding the weight; may be null.
  virtual void LinearForwardStashing(const T *x, uint16_t *x16, const T *weight,
                                     const uint16_t *weight16, const T *bias, int64_t rows,
                                     int64_t in, int64_t out, T *y, ComputeType compute) const {
    (void)x16, (void)weight16;
    LinearForward(x, weight, bias, rows, in, out, y, compute);
  }
  // dy [rows, out] -> dx [rows, in] (if non-null), then LinearWeightBackward
  // if dweight is non-null.
  virtual void LinearBackward(const T *dy, const T *x, const T *weight, int64_t rows, int64_t in,
                              int64_t out, T *dx, T *dweight, T *dbias,
                              ComputeType compute) const = 0;
  // dweight [out, in] += dy^T x; dbias [out] += column sums of dy (if non-null).
  virtual void LinearWeightBackward(const T *dy, const T *x, int64_t rows, int64_t in, int64_t out,
                                    T *dweight, T *dbias, ComputeType compute) const = 0;
  // The two above given also x's bf16 copy x16 (LayerActivations::Bf16: the
  // same values as x; may be null), which a backend multiplying in bf16 reads
  // instead of rounding x again, and the weight's (weight16, as
  // LinearForwardStashing's). By default neither is read.
  virtual void LinearBackwardStashed(const T *dy, const T *x, const uint16_t *x16, const T *weight,
                                     const uint16_t *weight16, int64_t rows, int64_t in,
                                     int64_t out, T *dx, T *dweight, T *dbias,
                                     ComputeType compute) const {
    (void)x16, (void)weight16;
    LinearBackward(dy, x, weight, rows, in, out, dx, dweight, dbias, compute);
  }
  virtual void LinearWeightBackwardStashed(const T *dy, const T *x, const uint16_t *x16,
                                           int64_t rows, int64_t in, int64_t out, T *dweight,
                                           T *dbias, ComputeType compute) const {
    (void)x16;
    LinearWeightBackward(dy, x, rows, in, out, dweight, dbias, compute);
  }

  // ---- LayerNorm over rows of C
  // x [rows, C] -> out [rows, C], mean [rows], rstd [rows].
  virtual void LayerNormForward(const T *x, const T *weight, const T *bias, int64_t rows, int64_t C,
                                T *out, T *mean, T *rstd) const = 0;
  // The same given also where out's bf16 copy goes (out16, may be null; out
  // may be null then, as GeluForwardStashing's).
  virtual void LayerNormForwardStashing(const T *x, const T *weight, const T *bias, int64_t rows,
                                        int64_t C, T *out, uint16_t *out16, T *mean,
                                        T *rstd) const {
    (void)out16;
    LayerNormForward(x, weight, bias, rows, C, out, mean, rstd);
  }
  // The residual sum res = a + b [rows, C] (Add), then LayerNormForwardStashing
  // of res (a transformer block's second LayerNorm reading its residual sum;
  // a backend may do both in one pass over the rows).
  virtual void AddLayerNormForward(const T *a, const T *b, T *res, const T *weight, const T *bias,
                                   int64_t rows, int64_t C, T *out, uint16_t *out16, T *mean,
                                   T *rstd) const {
    Add(a, b, rows * C, res);
    LayerNormForwardStashing(res, weight, bias, rows, C, out, out16, mean, rstd);
  }
  // dx [rows, C] += the input gradient; dweight, dbias [C] += theirs when
  // non-null. scratch: [max_threads, 2C].
  virtual void LayerNormBackward(const T *dout, const T *x, const T *weight, const T *mean,
                                 const T *rstd, int64_t rows, int64_t C, T *dx, T *dweight,
                                 T *dbias, T *scratch, int max_threads) const = 0;
  // dweight, dbias [C] += the parameter gradients only. scratch: [max_threads, 2C].
  virtual void LayerNormParamBackward(const T *dout, const T *x, const T *mean, const T *rstd,
                                      int64_t rows, int64_t C, T *dweight, T *dbias, T *scratch,
                                      int max_threads) const = 0;

  // ---- RMSNorm over rows of C (LLaMA): out = weight * x * rstd,
  // rstd = 1 / sqrt(mean(x^2) + eps)
  // x [rows, C] -> out [rows, C], rstd [rows]; out16: out's bf16 copy (may be
  // null; out may be null then, as LayerNormForwardStashing's).
  virtual void RmsNormForward(const T *x, const T *weight, int64_t rows, int64_t C, double eps,
                              T *out, uint16_t *out16, T *rstd) const = 0;
  // res = a + b [rows, C], then RmsNormForward of res (AddLayerNormForward's shape).
  virtual void AddRmsNormForward(const T *a, const T *b, T *res, const T *weight, int64_t rows,
                                 int64_t C, double eps, T *out, uint16_t *out16, T *rstd) const {
    Add(a, b, rows * C, res);
    RmsNormForward(res, weight, rows, C, eps, out, out16, rstd);
  }
  // dx [rows, C] += the input gradient; dweight [C] += its gradient when
  // non-null. scratch: [max_threads, C].
  virtual void RmsNormBackward(const T *dout, const T *x, const T *weight, const T *rstd,
                               int64_t rows, int64_t C, T *dx, T *dweight, T *scratch,
                               int max_threads) const = 0;
  // dweight [C] += the weight's gradient only. scratch: [max_threads, C].
  virtual void RmsNormParamBackward(const T *dout, const T *x, const T *rstd, int64_t rows,
                                    int64_t C, T *dweight, T *scratch, int max_threads) const = 0;

  // ---- rotary position embeddings (LLaMA), in place on a packed qkv tensor
  // [B, T, s.width()] (AttentionShape's layout): the query and key heads of
  // every row rotated by its position's angles (rotate_half pairs);
  // `inverse`: by the opposite angles (the backward, on their gradient).
  virtual void Rotary(T *qkv, const AttentionShape &s, const math::RopeParams &rope,
                      bool inverse) const = 0;

  // ---- gated MLP activation (LLaMA's SwiGLU): out = silu(gate) * up, [n]
  // each. out16: out's bf16 copy (may be null; out may be null then).
  virtual void SiluMulForward(const T *gate, const T *up, int64_t n, T *out,
                              uint16_t *out16) const = 0;
  // dgate = dout * up * silu'(gate), dup = dout * silu(gate) (assign).
  virtual void SiluMulBackward(const T *dout, const T *gate, const T *up, int64_t n, T *dgate,
                               T *dup) const = 0;

  // ---- causal attention core (after the QKV projection)
  // qkv [B, T, s.width()] -> att [B, H, T, T] softmax probabilities (saved), y [B, T, C].
  virtual void AttentionForward(const T *qkv, const AttentionShape &s, T *att, T *y,
                                ComputeType compute) const = 0;
  // The same given also where the bf16 copies of qkv and att go (may be
  // null; see LinearForwardStashing). att may be null when att16 is given
  // (only the bf16 probabilities are kept), as GeluForwardStashing's out;
  // qkv may be null when qkv16 holds its copy already (a recomputation of
  // the probabilities from the stash).
  virtual void AttentionForwardStashing(const T *qkv, uint16_t *qkv16, const AttentionShape &s,
                                        T *att, uint16_t *att16, T *y, ComputeType compute) const {
    (void)qkv16, (void)att16;
    AttentionForward(qkv, s, att, y, compute);
  }
  // Whether AttentionForward writes the probabilities att [B, H, T, T] for
  // AttentionBackward to read (the CPU's: yes). A fused backend that
  // recomputes instead says no: the layer then saves an empty att and sizes
  // no [threads, T, T] scratch for it.
  virtual bool KeepsAttentionProbabilities(const AttentionShape &) const { return true; }
  // Picks the attention method for a model whose largest micro-batch has
  // this shape, before its layers size their saved activations; every later
  // KeepsAttentionProbabilities answers by that choice (a smaller
  // micro-batch must not change what the saved activations hold). The CPU's
  // has one method.
  virtual void ChooseAttention(const AttentionShape &) const {}
  // dy [B, T, C] -> dqkv [B, T, s.width()]. scratch: [threads, T, T].
  virtual void AttentionBackward(const T *dy, const T *qkv, const T *att, const AttentionShape &s,
                                 T *dqkv, T *scratch, ComputeType compute) const = 0;
  // The same given also the bf16 copies of qkv and att (may be null; see
  // LinearBackwardStashed). By default they are not read.
  virtual void AttentionBackwardStashed(const T *dy, const T *qkv, const uint16_t *qkv16,
                                        const T *att, const uint16_t *att16,
                                        const AttentionShape &s, T *dqkv, T *scratch,
                                        ComputeType compute) const {
    (void)qkv16, (void)att16;
    AttentionBackward(dy, qkv, att, s, dqkv, scratch, compute);
  }

  // Generation: qkv [B, T, s.width()] holds new rows at positions
  // [s.position, s.position + T) (rotated already). Their keys and values are
  // written into the cache at those positions, then y [B, T, C] = each row's
  // causal attention over the cache's positions up to its own (ALiBi as
  // AttentionForward). No probabilities are kept. Same results as
  // AttentionForward over the whole sequence, up to the rounding of a
  // different summation order.
  virtual void AttentionCached(const T *qkv, const AttentionShape &s, const KvCacheView<T> &cache,
                               T *y, ComputeType compute) const = 0;

  // ---- embeddings (tokens [B, T] in [0, V))
  // out [B, T, C] = wte [V, C] rows of the tokens + wpe [T, C].
  virtual void EmbeddingForward(const int32_t *tokens, const T *wte, const T *wpe, int64_t B,
                                int64_t Tn, int64_t C, T *out) const = 0;
  // out [B, T, C] = the rows of wte [rows, C] (vocabulary rows [first,
  // first + rows)) of the tokens among them, zeros for the others.
  virtual void EmbeddingLookupRange(const int32_t *tokens, const T *wte, int64_t first,
                                    int64_t rows, int64_t B, int64_t Tn, int64_t C,
                                    T *out) const = 0;
  // out [rows, C] += wpe [t, C] where out's row r is token row first_row + r
  // of sequences of Tn tokens (t = (first_row + r) mod Tn).
  virtual void AddPositionsToRows(const T *wpe, int64_t first_row, int64_t rows, int64_t Tn,
                                  int64_t C, T *out) const = 0;
  // dwte [rows, C] += dout rows of the tokens in [first, first + rows);
  // dwpe [T, C] += dout summed over the batch (dwpe may be null: no learned positions).
  virtual void EmbeddingBackward(const T *dout, const int32_t *tokens, int64_t B, int64_t Tn,
                                 int64_t C, T *dwte, T *dwpe, int64_t first,
                                 int64_t rows) const = 0;

  // ---- losses (targets: [rows] in [0, V) or -1, ignored)
  // logits [rows, V] replaced by their softmax; returns the mean negative
  // log-likelihood over the counted (not ignored) targets.
  virtual double SoftmaxCrossEntropyForward(T *logits, const int32_t *targets, int64_t rows,
                                            int64_t V, int64_t *counted) const = 0;
  // dlogits [rows, V] = (probs - onehot(target - first)) * grad_scale / counted.
  virtual void SoftmaxCrossEntropyBackward(const T *probs, const int32_t *targets, int64_t rows,
                                           int64_t V, int64_t counted, T grad_scale, T *dlogits,
                                           int64_t first) const = 0;
  // Vocabulary-parallel cross-entropy in three passes around the group's
  // collectives (vocab_parallel.h). maxima [rows] = row maxima of logits [rows, V].
  virtual void RowMaxima(const T *logits, int64_t rows, int64_t V, T *maxima) const = 0;
  // With m = max over parts of maxima [parts, rows]: logits = exp(logits - m),
  // sums [rows] = their row sums, target_exp [rows] = the target's value
  // (target - first in [0, V)) or 0.
  virtual void ExpAndSums(T *logits, int64_t rows, int64_t V, const T *maxima, int64_t parts,
                          const int32_t *targets, int64_t first, T *sums, T *target_exp) const = 0;
  // logits /= sums (row-wise); returns the mean of -log(target_exp / sums)
  // over the counted targets (*counted of them).
  virtual double NormalizeAndNll(T *logits, int64_t rows, int64_t V, const T *sums,
                                 const T *target_exp, const int32_t *targets,
                                 int64_t *counted) const = 0;
  // The two forwards above with the host not waiting: the mean goes into
  // *loss_sum (one double in the backend's memory, added to) instead of
  // coming back, so a step's losses are read once (the engine's training
  // and evaluation programs); the caller counts the targets itself.
  virtual void SoftmaxCrossEntropyForwardInto(T *logits, const int32_t *targets, int64_t rows,
                                              int64_t V, double *loss_sum) const = 0;
  virtual void NormalizeAndNllInto(T *logits, int64_t rows, int64_t V, const T *sums,
                                   const T *target_exp, const int32_t *targets,
                                   double *loss_sum) const = 0;
  // Mean squared error of pred, labels [n].
  virtual double MseForward(const T *pred, const T *labels, int64_t n) const = 0;
  // dpred [n] = 2 (pred - labels) grad_scale / mean_over (n when 0).
  virtual void MseBackward(const T *pred, const T *labels, int64_t n, T grad_scale, T *dpred,
                           int64_t mean_over) const = 0;
};

// The CPU backend (cpu/cpu_kernels.h): host memory, the dst::cpu kernels.
template <typename T>
const Kernels<T> &HostKernels();

}  // namespace dst
