// The CUDA kernel backend (issue 16): Kernels<float> (core/kernels/kernels.h)
// and StepKernels (core/kernels/step_kernels.h) over the CUDA plugin's kernel
// table (cuda_kernel_table.h), on one device, every kernel queued on one
// stream. The layers' tensors, the tokens and
// targets must be that device's memory. A failed kernel is kept (the first
// one) and reported by TakeError, which the model calls after each layer
// pass; the losses come back to the host, so those calls wait for the stream.
//
// The kernels are fp32 (the layers' ComputeType::kBf16 GEMMs round their
// operands to bf16 and accumulate in fp32, as on the CPU; attention and the
// element-wise kernels compute in fp32 whatever the compute type). The
// scratch a layer hands a kernel (sized for the CPU's threads) is not used:
// the backend keeps its own workspaces on the device.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/common/status.h"
#include "core/kernels/kernels.h"
#include "core/kernels/step_kernels.h"
#include "core/kernels/cuda/cuda_kernel_table.h"
#include "core/device/cuda_seam.h"

namespace dst {

// The CUDA plugin's attention rules (cuda_kernel_table.h): whether a model
// whose largest micro-batch has shape `largest` takes the batched-GEMM path
// (GPT-2's head layout, the probabilities within their bound,
// DSTRAIN_CUDA_ATTENTION), and whether the attention then leaves the
// probabilities in `att` for shape s (the GEMM path, or where the fused
// kernel does not take the shape; not where the fused kernel runs, whatever
// the head layout: grouped-query, BLOOM's interleaved, ALiBi).
bool CudaGemmAttentionFor(const AttentionShape &largest);
bool CudaAttentionKeepsProbabilities(const AttentionShape &s, bool gemm);

class CudaKernels final : public Kernels<float>, public StepKernels {
 public:
  // The backend on `stream`'s device, queuing on it (the stream must outlive
  // the backend); kNotSupported says why there is none (no plugin, a plugin
  // older than this library).
  static Result<std::unique_ptr<CudaKernels>> Create(const CudaRuntime &runtime,
                                                     const CudaStream &stream);
  // The backend over `table` (which must outlive it) on `device`, queuing on
  // `stream` (a cudaStream_t): what Create does with the plugin's table, and
  // what the unit tests do with a recording one.
  static Result<std::unique_ptr<CudaKernels>> WithTable(const DstCudaKernelTable &table, int device,
                                                        void *stream);
  // Whether this build's CUDA plugin exports a complete kernel table (no
  // device needed): kNotSupported says why not.
  static Status CheckPlugin();
  ~CudaKernels() override;
  CudaKernels(const CudaKernels &) = delete;
  CudaKernels &operator=(const CudaKernels &) = delete;

  const char *name() const override { return name_.c_str(); }
  Status TakeError() const override;
  // CudaAttentionKeepsProbabilities(s, the GEMM path chosen).
  bool KeepsAttentionProbabilities(const AttentionShape &s) const override;
  // CudaGemmAttentionFor(largest), told to the plugin (set_attention_gemm);
  // the GEMM path is off until then.
  void ChooseAttention(const AttentionShape &largest) const override;
  // Run before each kernel that returns a value to the host (a loss, a sum
  // of squares: the host waits for the stream there), as
  // CudaStream::SetBeforeHostWait; a failure is kept as the kernel's error.
  void SetBeforeHostWait(std::function<Status()> hook) { before_host_wait_ = std::move(hook); }

  void Copy(const float *src, int64_t n, float *dst) const override;
  void CopyRows(const float *src, int64_t src_stride, int64_t rows, int64_t width, float *dst,
                int64_t dst_stride) const override;
  void Zero(int64_t n, float *dst) const override;
  void FillColumns(float *x, int64_t rows, int64_t width, int64_t begin,
                   float value) const override;
  void RoundTo16(Half half, float *x, int64_t n) const override;
  void StashTo16(Half half, float *x, int64_t n, uint16_t *stash) const override;
  void UnstashFrom16(Half half, const uint16_t *stash, int64_t n, float *x) const override;
  void Add(const float *a, const float *b, int64_t n, float *out) const override;
  void AddInPlace(const float *x, int64_t n, float *y) const override;
  void AddBiasToRows(const float *bias, int64_t rows, int64_t out, float *y) const override;
  void GeluForward(const float *x, int64_t n, float *out) const override;
  void GeluBackward(const float *dout, const float *x, int64_t n, float *dx) const override;
  void ReluForward(const float *x, int64_t n, float *out) const override;
  void ReluBackward(const float *dout, const float *x, int64_t n, float *dx) const override;
  void LinearForward(const float *x, const float *weight, const float *bias, int64_t rows,
                     int64_t in, int64_t out, float *y, ComputeType compute) const override;
  void LinearBackward(const float *dy, const float *x, const float *weight, int64_t rows,
                      int64_t in, int64_t out, float *dx, float *dweight, float *dbias,
                      ComputeType compute) const override;
  void LinearWeightBackward(const float *dy, const float *x, int64_t rows, int64_t in, int64_t out,
                            float *dweight, float *dbias, ComputeType compute) const override;
  void LayerNormForward(const float *x, const float *weight, const float *bias, int64_t rows,
                        int64_t C, float *out, float *mean, float *rstd) const override;
  void LayerNormBackward(const float *dout, const float *x, const float *weight, const float *mean,
                         const float *rstd, int64_t rows, int64_t C, float *dx, float *dweight,
                         float *dbias, float *scratch, int max_threads) const override;
  void LayerNormParamBackward(const float *dout, const float *x, const float *mean,
                              const float *rstd, int64_t rows, int64_t C, float *dweight,
                              float *dbias, float *scratch, int max_threads) const override;
  // The LLaMA / BLOOM kernels (family_kernels.cu; an older plugin without
  // them records a "not supported yet" error naming the kernel).
  void RmsNormForward(const float *x, const float *weight, int64_t rows, int64_t C, double eps,
                      float *out, uint16_t *out16, float *rstd) const override;
  void RmsNormBackward(const float *dout, const float *x, const float *weight, const float *rstd,
                       int64_t rows, int64_t C, float *dx, float *dweight, float *scratch,
                       int max_threads) const override;
  void RmsNormParamBackward(const float *dout, const float *x, const float *rstd, int64_t rows,
                            int64_t C, float *dweight, float *scratch,
                            int max_threads) const override;
  void Rotary(float *qkv, const AttentionShape &s, const math::RopeParams &rope,
              bool inverse) const override;
  void SiluMulForward(const float *gate, const float *up, int64_t n, float *out,
                      uint16_t *out16) const override;
  void SiluMulBackward(const float *dout, const float *gate, const float *up, int64_t n,
                       float *dgate, float *dup) const override;
  void AttentionForward(const float *qkv, const AttentionShape &s, float *att, float *y,
                        ComputeType compute) const override;
  void AttentionBackward(const float *dy, const float *qkv, const float *att,
                         const AttentionShape &s, float *dqkv, float *scratch,
                         ComputeType compute) const override;
  // Generation runs on the CPU backend: recorded as not supported.
  void AttentionCached(const float *qkv, const AttentionShape &s, const KvCacheView<float> &cache,
                       float *y, ComputeType compute) const override;
  void EmbeddingForward(const int32_t *tokens, const float *wte, const float *wpe, int64_t B,
                        int64_t Tn, int64_t C, float *out) const override;
  void EmbeddingLookupRange(const int32_t *tokens, const float *wte, int64_t first, int64_t rows,
                            int64_t B, int64_t Tn, int64_t C, float *out) const override;
  void AddPositionsToRows(const float *wpe, int64_t first_row, int64_t rows, int64_t Tn, int64_t C,
                          float *out) const override;
  void EmbeddingBackward(const float *dout, const int32_t *tokens, int64_t B, int64_t Tn, int64_t C,
                         float *dwte, float *dwpe, int64_t first, int64_t rows) const override;
  double SoftmaxCrossEntropyForward(float *logits, const int32_t *targets, int64_t rows, int64_t V,
                                    int64_t *counted) const override;
  void SoftmaxCrossEntropyBackward(const float *probs, const int32_t *targets, int64_t rows,
                                   int64_t V, int64_t counted, float grad_scale, float *dlogits,
                                   int64_t first) const override;
  void RowMaxima(const float *logits, int64_t rows, int64_t V, float *maxima) const override;
  void ExpAndSums(float *logits, int64_t rows, int64_t V, const float *maxima, int64_t parts,
                  const int32_t *targets, int64_t first, float *sums,
                  float *target_exp) const override;
  double NormalizeAndNll(float *logits, int64_t rows, int64_t V, const float *sums,
                         const float *target_exp, const int32_t *targets,
                         int64_t *counted) const override;
  void SoftmaxCrossEntropyForwardInto(float *logits, const int32_t *targets, int64_t rows,
                                      int64_t V, double *loss_sum) const override;
  void NormalizeAndNllInto(float *logits, int64_t rows, int64_t V, const float *sums,
                           const float *target_exp, const int32_t *targets,
                           double *loss_sum) const override;
  double MseForward(const float *pred, const float *labels, int64_t n) const override;
  void MseBackward(const float *pred, const float *labels, int64_t n, float grad_scale,
                   float *dpred, int64_t mean_over) const override;

  // StepKernels: the flat ranges of the optimizer step.
  void ZeroRange(int64_t n, float *x) const override { Zero(n, x); }
  void CopyRange(const float *src, int64_t n, float *dst) const override { Copy(src, n, dst); }
  void ScaleRange(float k, int64_t n, float *x) const override;
  double SumOfSquaresRange(const float *x, int64_t n) const override;
  void AdamUpdate(const AdamRange &r, const AdamHyper &h) const override;
  // Not on the device yet: recorded as "not supported" (the config gate
  // sends Lamb's state to the host with offload_optimizer first).
  LambSums LambMoments(const LambRange &r, const LambHyper &h) const override;
  void AdamMomentum(const AdamRange &r, const AdamHyper &h) const override;
  void AdamApply(const AdamRange &r, const AdamHyper &h) const override;
  void ZeroOneUpdate(const AdamRange &r, const AdamHyper &h, cpu::ZeroOnePhase phase, float *acc,
                     float lrs) const override;
  void LambApply(const LambRange &r, const LambHyper &h, float trust) const override;
  void OneBitLambMomentum(const LambRange &r, const LambHyper &h, float scaling,
                          float *m_last) const override;
  cpu::OneBitLambPartial OneBitLambStats(const LambRange &r, const LambHyper &h,
                                         const float *m_last, float *v_fresh,
                                         float scaling) const override;
  void OneBitLambFinish(const LambRange &r, const LambHyper &h, float scale) const override;
  void SgdUpdate(const float *grad, int64_t n, const SgdHyper &h, float *param,
                 float *momentum) const override;
  void AddRange(const float *add, int64_t n, float *acc) const override { AddInPlace(add, n, acc); }
  void CopyBytes(const void *src, size_t bytes, void *dst) const override;
  void Widen16(Half h, const uint16_t *src, int64_t n, float *dst) const override {
    UnstashFrom16(h, src, n, dst);
  }
  void Narrow16(Half h, const float *src, int64_t n, uint16_t *dst) const override;
  void AddInto16(Half h, const float *add, int64_t n, uint16_t *acc) const override;
  void AddWide16(Half h, const uint16_t *add, int64_t n, float *acc) const override;
  void Sum16(Half h, const uint16_t *add, int64_t n, uint16_t *acc) const override;
  double SumOfSquares16(Half h, const uint16_t *x, int64_t n) const override;

 private:
  CudaKernels(const DstCudaKernelTable &table, void *context, int device)
      : t_(table), ctx_(context), name_("cuda:" + std::to_string(device)) {}
  // Keeps the first failure (`kernel` names it).
  void Check(int code, const char *kernel) const;
  // Records that `kernel` has no CUDA implementation in this plugin.
  void NotBuilt(const char *kernel) const;
  // A kernel this backend does not have, recorded as kNotSupported.
  void Unsupported(const char *what) const;
  void Unsupported(const char *what, const char *instead) const;
  // Whether the plugin's table reaches `end` (bytes: an entry's offset + size).
  bool Has(size_t end) const { return t_.size >= end; }
  // The hook before a host wait: false (the failure kept) when it failed.
  bool ReadyForHostWait(const char *kernel) const;

  const DstCudaKernelTable &t_;
  void *ctx_;
  std::string name_;
  mutable Status error_;
  mutable bool gemm_attention_ = false;  // ChooseAttention's
  std::function<Status()> before_host_wait_;
};

}  // namespace dst
