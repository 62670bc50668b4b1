#include "core/device/cuda_kernels.h"

#include <cstdlib>

#include <cstddef>
#include <cstring>
#include <limits>
#include <utility>

#include "core/common/log.h"

namespace dst {

namespace {

// The plugin's kernel table, loaded once per process, or why there is none.
Result<DstCudaKernelTable> LoadKernelTable() {
  const Result<void *> entry = CudaPluginEntry("dst_cuda_plugin_kernels");
  if (!entry.ok()) return entry.status();
  DstCudaKernelTable table{};
  table.size = sizeof table;
  if (reinterpret_cast<DstCudaKernelsFn>(entry.value())(&table) != 0 || table.size != sizeof table)
    return Status(Code::kNotSupported,
                  "the CUDA plugin's kernel table is older than this libdstrain (reinstall both "
                  "from one build)");
  // Every entry after `size` is a function pointer, and each must be filled.
  const size_t first = offsetof(DstCudaKernelTable, context_create);
  for (size_t at = first; at < sizeof table; at += sizeof(void (*)())) {
    void (*fn)() = nullptr;
    std::memcpy(&fn, reinterpret_cast<const char *>(&table) + at, sizeof fn);
    if (fn == nullptr)
      return Status(Code::kNotSupported, "the CUDA plugin's kernel table leaves entry " +
                                             std::to_string((at - first) / sizeof fn) +
                                             " empty (a plugin from another build?)");
  }
  return table;
}

int HalfCode(Half half) {
  return half == Half::kBf16 ? DST_CUDA_HALF_BF16 : DST_CUDA_HALF_FP16;
}

int ComputeCode(ComputeType compute) {
  return compute == ComputeType::kBf16 ? DST_CUDA_COMPUTE_BF16 : DST_CUDA_COMPUTE_FP32;
}

constexpr size_t kFloat = sizeof(float);
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

static_assert(sizeof(DstCudaAdamConstants) == sizeof(math::AdamConstants),
              "the table's Adam constants are math::AdamConstants field for field");

const Result<DstCudaKernelTable> &KernelTable() {
  static const Result<DstCudaKernelTable> table = LoadKernelTable();
  return table;
}

}  // namespace

Status CudaKernels::CheckPlugin() {
  return KernelTable().status();
}

Result<std::unique_ptr<CudaKernels>> CudaKernels::Create(const CudaRuntime &runtime,
                                                         const CudaStream &stream) {
  (void)runtime;  // the stream's device is the runtime's; the table is its own
  const Result<DstCudaKernelTable> &table = KernelTable();
  if (!table.ok()) return table.status();
  return WithTable(table.value(), stream.device(), stream.handle());
}

Result<std::unique_ptr<CudaKernels>> CudaKernels::WithTable(const DstCudaKernelTable &table,
                                                            int device, void *stream) {
  void *context = nullptr;
  const int code = table.context_create(device, stream, &context);
  if (code != 0)
    return Status(Code::kInternal, "creating the CUDA kernel backend on cuda:" +
                                       std::to_string(device) + ": " + table.error_string(code));
  return std::unique_ptr<CudaKernels>(new CudaKernels(table, context, device));
}

CudaKernels::~CudaKernels() {
  const int code = t_.context_destroy(ctx_);
  if (code != 0)
    DST_LOG(kWarning, "cuda",
            "closing the kernel backend on " + name_ + ": " + t_.error_string(code));
}

void CudaKernels::Check(int code, const char *kernel) const {
  if (code == 0 || !error_.ok()) return;
  error_ = Status(Code::kInternal, std::string("CUDA kernel ") + kernel + " on " + name_ + ": " +
                                       t_.error_string(code));
}

void CudaKernels::NotBuilt(const char *kernel) const {
  if (!error_.ok()) return;
  error_ = NotSupported(std::string("CUDA kernel ") + kernel + " on " + name_ +
                        " is not supported by this CUDA plugin (built before it had the kernel): "
                        "rebuild libdstrain_cuda.so with this libdstrain.so");
}

void CudaKernels::Unsupported(const char *what) const {
  Unsupported(what, "generation runs on the CPU backend");
}

void CudaKernels::Unsupported(const char *what, const char *instead) const {
  if (!error_.ok()) return;
  error_ = NotSupported(std::string(what) + " is not supported on " + name_ + " yet: " + instead);
}

// A table entry this plugin may predate: present, or the call records why not.
#define DST_TABLE_HAS(entry) \
  (Has(offsetof(DstCudaKernelTable, entry) + sizeof(t_.entry)) && t_.entry != nullptr)

void CudaKernels::SoftmaxCrossEntropyForwardInto(float *logits, const int32_t *targets,
                                                 int64_t rows, int64_t V, double *loss_sum) const {
  if (!DST_TABLE_HAS(cross_entropy_forward_into)) return NotBuilt("SoftmaxCrossEntropyForwardInto");
  Check(t_.cross_entropy_forward_into(ctx_, logits, targets, rows, V, loss_sum),
        "SoftmaxCrossEntropyForwardInto");
}

void CudaKernels::NormalizeAndNllInto(float *logits, int64_t rows, int64_t V, const float *sums,
                                      const float *target_exp, const int32_t *targets,
                                      double *loss_sum) const {
  if (!DST_TABLE_HAS(normalize_and_nll_into)) return NotBuilt("NormalizeAndNllInto");
  Check(t_.normalize_and_nll_into(ctx_, logits, rows, V, sums, target_exp, targets, loss_sum),
        "NormalizeAndNllInto");
}

void CudaKernels::FillColumns(float *x, int64_t rows, int64_t width, int64_t begin,
                              float value) const {
  if (!DST_TABLE_HAS(fill_columns)) return NotBuilt("FillColumns");
  Check(t_.fill_columns(ctx_, x, rows, width, begin, value), "FillColumns");
}

namespace {

DstCudaAttentionShape ShapeOf(const AttentionShape &s) {
  return {long(s.B),           long(s.T),         long(s.C),
          long(s.H),           long(s.kv()),      s.interleaved ? 1 : 0,
          long(s.alibi_heads), long(s.first_head)};
}

}  // namespace

bool CudaGemmAttentionFor(const AttentionShape &largest) {
  const DstCudaAttentionShape shape = ShapeOf(largest);
  return dst_cuda_gemm_attention_for(&shape) != 0;
}

bool CudaAttentionKeepsProbabilities(const AttentionShape &s, bool gemm) {
  const DstCudaAttentionShape shape = ShapeOf(s);
  return dst_cuda_attention_keeps_probabilities(&shape, gemm ? 1 : 0) != 0;
}

bool CudaKernels::KeepsAttentionProbabilities(const AttentionShape &s) const {
  return CudaAttentionKeepsProbabilities(s, gemm_attention_);
}

void CudaKernels::ChooseAttention(const AttentionShape &largest) const {
  if (!dst_cuda_attention_choice_valid() && error_.ok())
    error_ = Status(Code::kInvalidArgument, std::string("DSTRAIN_CUDA_ATTENTION=") +
                                                std::getenv("DSTRAIN_CUDA_ATTENTION") +
                                                ": expected auto (the default), fused or gemm");
  // (A plugin without the entry keeps the fused kernel.)
  const bool gemm = DST_TABLE_HAS(set_attention_gemm) && CudaGemmAttentionFor(largest);
  if (DST_TABLE_HAS(set_attention_gemm))
    Check(t_.set_attention_gemm(ctx_, gemm ? 1 : 0), "set_attention_gemm");
  gemm_attention_ = gemm;
}

void CudaKernels::RmsNormForward(const float *x, const float *weight, int64_t rows, int64_t C,
                                 double eps, float *out, uint16_t *, float *rstd) const {
  if (!DST_TABLE_HAS(rmsnorm_forward)) return NotBuilt("RmsNormForward");
  Check(t_.rmsnorm_forward(ctx_, x, weight, rows, C, float(eps), out, rstd), "RmsNormForward");
}
void CudaKernels::RmsNormBackward(const float *dout, const float *x, const float *weight,
                                  const float *rstd, int64_t rows, int64_t C, float *dx,
                                  float *dweight, float *, int) const {
  if (!DST_TABLE_HAS(rmsnorm_backward)) return NotBuilt("RmsNormBackward");
  Check(t_.rmsnorm_backward(ctx_, dout, x, weight, rstd, rows, C, dx, dweight), "RmsNormBackward");
}
void CudaKernels::RmsNormParamBackward(const float *dout, const float *x, const float *rstd,
                                       int64_t rows, int64_t C, float *dweight, float *,
                                       int) const {
  if (!DST_TABLE_HAS(rmsnorm_backward)) return NotBuilt("RmsNormParamBackward");
  Check(t_.rmsnorm_backward(ctx_, dout, x, nullptr, rstd, rows, C, nullptr, dweight),
        "RmsNormParamBackward");
}
void CudaKernels::Rotary(float *qkv, const AttentionShape &s, const math::RopeParams &r,
                         bool inverse) const {
  if (!DST_TABLE_HAS(rotary)) return NotBuilt("Rotary");
  if (s.position != 0) return Unsupported("rotary embeddings past position 0 (generation)");
  const DstCudaAttentionShape shape = ShapeOf(s);
  const DstCudaRope rope{r.theta,           r.scaling,          r.factor,
                         r.low_freq_factor, r.high_freq_factor, r.original_max_position};
  Check(t_.rotary(ctx_, qkv, &shape, &rope, inverse ? 1 : 0), "Rotary");
}
void CudaKernels::AttentionCached(const float *, const AttentionShape &, const KvCacheView<float> &,
                                  float *, ComputeType) const {
  Unsupported("attention over a key/value cache (generation)");
}
void CudaKernels::SiluMulForward(const float *gate, const float *up, int64_t n, float *out,
                                 uint16_t *) const {
  if (!DST_TABLE_HAS(silu_mul_forward)) return NotBuilt("SiluMulForward");
  Check(t_.silu_mul_forward(ctx_, gate, up, n, out), "SiluMulForward");
}
void CudaKernels::SiluMulBackward(const float *dout, const float *gate, const float *up, int64_t n,
                                  float *dgate, float *dup) const {
  if (!DST_TABLE_HAS(silu_mul_backward)) return NotBuilt("SiluMulBackward");
  Check(t_.silu_mul_backward(ctx_, dout, gate, up, n, dgate, dup), "SiluMulBackward");
}

bool CudaKernels::ReadyForHostWait(const char *kernel) const {
  if (!before_host_wait_) return true;
  Status st = before_host_wait_();
  if (st.ok()) return true;
  if (error_.ok())
    error_ = st.context(std::string("before CUDA kernel ") + kernel + " on " + name_);
  return false;
}

Status CudaKernels::TakeError() const {
  return std::exchange(error_, Status::Ok());
}

void CudaKernels::Copy(const float *src, int64_t n, float *dst) const {
  const size_t bytes = size_t(n) * kFloat;
  Check(t_.copy_rows(ctx_, src, bytes, 1, bytes, dst, bytes), "Copy");
}
void CudaKernels::CopyRows(const float *src, int64_t src_stride, int64_t rows, int64_t width,
                           float *dst, int64_t dst_stride) const {
  Check(t_.copy_rows(ctx_, src, size_t(src_stride) * kFloat, size_t(rows), size_t(width) * kFloat,
                     dst, size_t(dst_stride) * kFloat),
        "CopyRows");
}
void CudaKernels::Zero(int64_t n, float *dst) const {
  Check(t_.zero(ctx_, dst, size_t(n) * kFloat), "Zero");
}
void CudaKernels::RoundTo16(Half half, float *x, int64_t n) const {
  Check(t_.round_to_16(ctx_, HalfCode(half), x, n), "RoundTo16");
}
void CudaKernels::StashTo16(Half half, float *x, int64_t n, uint16_t *stash) const {
  Check(t_.stash_to_16(ctx_, HalfCode(half), x, n, stash), "StashTo16");
}
void CudaKernels::UnstashFrom16(Half half, const uint16_t *stash, int64_t n, float *x) const {
  Check(t_.unstash_from_16(ctx_, HalfCode(half), stash, n, x), "UnstashFrom16");
}
void CudaKernels::Add(const float *a, const float *b, int64_t n, float *out) const {
  Check(t_.add(ctx_, a, b, n, out), "Add");
}
void CudaKernels::AddInPlace(const float *x, int64_t n, float *y) const {
  Check(t_.add_in_place(ctx_, x, n, y), "AddInPlace");
}
void CudaKernels::AddBiasToRows(const float *bias, int64_t rows, int64_t out, float *y) const {
  Check(t_.add_bias_to_rows(ctx_, bias, rows, out, y), "AddBiasToRows");
}
void CudaKernels::GeluForward(const float *x, int64_t n, float *out) const {
  Check(t_.gelu_forward(ctx_, x, n, out), "GeluForward");
}
void CudaKernels::GeluBackward(const float *dout, const float *x, int64_t n, float *dx) const {
  Check(t_.gelu_backward(ctx_, dout, x, n, dx), "GeluBackward");
}
void CudaKernels::ReluForward(const float *x, int64_t n, float *out) const {
  Check(t_.relu_forward(ctx_, x, n, out), "ReluForward");
}
void CudaKernels::ReluBackward(const float *dout, const float *x, int64_t n, float *dx) const {
  Check(t_.relu_backward(ctx_, dout, x, n, dx), "ReluBackward");
}
void CudaKernels::LinearForward(const float *x, const float *weight, const float *bias,
                                int64_t rows, int64_t in, int64_t out, float *y,
                                ComputeType compute) const {
  Check(t_.linear_forward(ctx_, x, weight, bias, rows, in, out, y, ComputeCode(compute)),
        "LinearForward");
}
void CudaKernels::LinearBackward(const float *dy, const float *x, const float *weight, int64_t rows,
                                 int64_t in, int64_t out, float *dx, float *dweight, float *dbias,
                                 ComputeType compute) const {
  if (dx)
    Check(t_.linear_input_backward(ctx_, dy, weight, rows, in, out, dx, ComputeCode(compute)),
          "LinearBackward");
  if (dweight) LinearWeightBackward(dy, x, rows, in, out, dweight, dbias, compute);
}
void CudaKernels::LinearWeightBackward(const float *dy, const float *x, int64_t rows, int64_t in,
                                       int64_t out, float *dweight, float *dbias,
                                       ComputeType compute) const {
  Check(t_.linear_weight_backward(ctx_, dy, x, rows, in, out, dweight, dbias, ComputeCode(compute)),
        "LinearWeightBackward");
}
void CudaKernels::LayerNormForward(const float *x, const float *weight, const float *bias,
                                   int64_t rows, int64_t C, float *out, float *mean,
                                   float *rstd) const {
  Check(t_.layernorm_forward(ctx_, x, weight, bias, rows, C, out, mean, rstd), "LayerNormForward");
}
void CudaKernels::LayerNormBackward(const float *dout, const float *x, const float *weight,
                                    const float *mean, const float *rstd, int64_t rows, int64_t C,
                                    float *dx, float *dweight, float *dbias, float *, int) const {
  Check(t_.layernorm_backward(ctx_, dout, x, weight, mean, rstd, rows, C, dx, dweight, dbias),
        "LayerNormBackward");
}
void CudaKernels::LayerNormParamBackward(const float *dout, const float *x, const float *mean,
                                         const float *rstd, int64_t rows, int64_t C, float *dweight,
                                         float *dbias, float *, int) const {
  Check(t_.layernorm_backward(ctx_, dout, x, nullptr, mean, rstd, rows, C, nullptr, dweight, dbias),
        "LayerNormParamBackward");
}
// With the compute entries (the GEMM path's bf16 products for a bf16 layer)
// where the plugin has them; else the general entries for the family layouts
// and GPT's own for GPT-2's.
void CudaKernels::AttentionForward(const float *qkv, const AttentionShape &s, float *att, float *y,
                                   ComputeType compute) const {
  const DstCudaAttentionShape shape = ShapeOf(s);
  if (DST_TABLE_HAS(attention_forward_compute))
    return Check(t_.attention_forward_compute(ctx_, qkv, &shape, att, y, ComputeCode(compute)),
                 "AttentionForward");
  if (!s.plain()) {  // grouped-query, interleaved or ALiBi: the general kernels
    if (!DST_TABLE_HAS(attention_forward_general)) return NotBuilt("AttentionForward (general)");
    return Check(t_.attention_forward_general(ctx_, qkv, &shape, att, y), "AttentionForward");
  }
  Check(t_.attention_forward(ctx_, qkv, s.B, s.T, s.C, s.H, att, y), "AttentionForward");
}
void CudaKernels::AttentionBackward(const float *dy, const float *qkv, const float *att,
                                    const AttentionShape &s, float *dqkv, float *,
                                    ComputeType compute) const {
  const DstCudaAttentionShape shape = ShapeOf(s);
  if (DST_TABLE_HAS(attention_backward_compute))
    return Check(
        t_.attention_backward_compute(ctx_, dy, qkv, att, &shape, dqkv, ComputeCode(compute)),
        "AttentionBackward");
  if (!s.plain()) {
    if (!DST_TABLE_HAS(attention_backward_general)) return NotBuilt("AttentionBackward (general)");
    return Check(t_.attention_backward_general(ctx_, dy, qkv, att, &shape, dqkv),
                 "AttentionBackward");
  }
  Check(t_.attention_backward(ctx_, dy, qkv, att, s.B, s.T, s.C, s.H, dqkv), "AttentionBackward");
}
void CudaKernels::EmbeddingForward(const int32_t *tokens, const float *wte, const float *wpe,
                                   int64_t B, int64_t Tn, int64_t C, float *out) const {
  EmbeddingLookupRange(tokens, wte, 0, std::numeric_limits<long>::max(), B, Tn, C, out);
  AddPositionsToRows(wpe, 0, B * Tn, Tn, C, out);
}
void CudaKernels::EmbeddingLookupRange(const int32_t *tokens, const float *wte, int64_t first,
                                       int64_t rows, int64_t B, int64_t Tn, int64_t C,
                                       float *out) const {
  Check(t_.embedding_lookup(ctx_, tokens, wte, first, rows, B, Tn, C, out), "EmbeddingLookup");
}
void CudaKernels::AddPositionsToRows(const float *wpe, int64_t first_row, int64_t rows, int64_t Tn,
                                     int64_t C, float *out) const {
  Check(t_.add_positions_to_rows(ctx_, wpe, first_row, rows, Tn, C, out), "AddPositionsToRows");
}
void CudaKernels::EmbeddingBackward(const float *dout, const int32_t *tokens, int64_t B, int64_t Tn,
                                    int64_t C, float *dwte, float *dwpe, int64_t first,
                                    int64_t rows) const {
  Check(t_.embedding_backward(ctx_, dout, tokens, B, Tn, C, dwte, dwpe, first, rows),
        "EmbeddingBackward");
}
double CudaKernels::SoftmaxCrossEntropyForward(float *logits, const int32_t *targets, int64_t rows,
                                               int64_t V, int64_t *counted) const {
  double loss = 0;
  long n = 0;
  if (!ReadyForHostWait("SoftmaxCrossEntropyForward")) return *counted = 0, kNaN;
  Check(t_.cross_entropy_forward(ctx_, logits, targets, rows, V, &loss, &n),
        "SoftmaxCrossEntropyForward");
  *counted = n;
  return loss;
}
void CudaKernels::SoftmaxCrossEntropyBackward(const float *probs, const int32_t *targets,
                                              int64_t rows, int64_t V, int64_t counted,
                                              float grad_scale, float *dlogits,
                                              int64_t first) const {
  Check(
      t_.cross_entropy_backward(ctx_, probs, targets, rows, V, counted, grad_scale, dlogits, first),
      "SoftmaxCrossEntropyBackward");
}
void CudaKernels::RowMaxima(const float *logits, int64_t rows, int64_t V, float *maxima) const {
  Check(t_.row_maxima(ctx_, logits, rows, V, maxima), "RowMaxima");
}
void CudaKernels::ExpAndSums(float *logits, int64_t rows, int64_t V, const float *maxima,
                             int64_t parts, const int32_t *targets, int64_t first, float *sums,
                             float *target_exp) const {
  Check(t_.exp_and_sums(ctx_, logits, rows, V, maxima, parts, targets, first, sums, target_exp),
        "ExpAndSums");
}
double CudaKernels::NormalizeAndNll(float *logits, int64_t rows, int64_t V, const float *sums,
                                    const float *target_exp, const int32_t *targets,
                                    int64_t *counted) const {
  double loss = 0;
  long n = 0;
  if (!ReadyForHostWait("NormalizeAndNll")) return *counted = 0, kNaN;
  Check(t_.normalize_and_nll(ctx_, logits, rows, V, sums, target_exp, targets, &loss, &n),
        "NormalizeAndNll");
  *counted = n;
  return loss;
}
double CudaKernels::MseForward(const float *pred, const float *labels, int64_t n) const {
  double loss = 0;
  if (!ReadyForHostWait("MseForward")) return kNaN;
  Check(t_.mse_forward(ctx_, pred, labels, n, &loss), "MseForward");
  return loss;
}
void CudaKernels::MseBackward(const float *pred, const float *labels, int64_t n, float grad_scale,
                              float *dpred, int64_t mean_over) const {
  Check(t_.mse_backward(ctx_, pred, labels, n, grad_scale, dpred, mean_over), "MseBackward");
}

// ---------------------------------------------------------------- step backend

void CudaKernels::ScaleRange(float k, int64_t n, float *x) const {
  Check(t_.scale(ctx_, k, n, x), "ScaleRange");
}

double CudaKernels::SumOfSquaresRange(const float *x, int64_t n) const {
  double sum = 0;
  if (!ReadyForHostWait("SumOfSquaresRange")) return kNaN;
  const int code = t_.sum_of_squares(ctx_, x, n, &sum);
  Check(code, "SumOfSquaresRange");
  return code == 0 ? sum : std::numeric_limits<double>::quiet_NaN();
}

void CudaKernels::AdamUpdate(const AdamRange &r, const AdamHyper &h) const {
  const math::AdamConstants k = cpu::AdamConstantsFor(h, r.grad_mul);
  const DstCudaAdamConstants c{k.b1,        k.omb1,  k.b2, k.omb2, k.bias2_sqrt,
                               k.step_size, k.decay, k.l2, k.eps,  k.grad_mul};
  Check(t_.adam(ctx_, r.param, r.grad, r.exp_avg, r.exp_avg_sq, r.n, &c, r.half_out,
                HalfCode(r.half)),
        "AdamUpdate");
}

void CudaKernels::AdamMomentum(const AdamRange &, const AdamHyper &) const {
  Unsupported("1-bit Adam's momentum exchange", "use Adam / AdamW on the device");
}

void CudaKernels::AdamApply(const AdamRange &, const AdamHyper &) const {
  Unsupported("1-bit Adam's momentum exchange", "use Adam / AdamW on the device");
}

void CudaKernels::ZeroOneUpdate(const AdamRange &, const AdamHyper &, cpu::ZeroOnePhase, float *,
                                float) const {
  Unsupported("0/1 Adam's exchanges", "use Adam / AdamW on the device");
}

void CudaKernels::OneBitLambMomentum(const LambRange &, const LambHyper &, float, float *) const {
  Unsupported("1-bit LAMB's exchange", "use Lamb with offload_optimizer cpu");
}

cpu::OneBitLambPartial CudaKernels::OneBitLambStats(const LambRange &, const LambHyper &,
                                                    const float *, float *, float) const {
  Unsupported("1-bit LAMB's exchange", "use Lamb with offload_optimizer cpu");
  return {};
}

void CudaKernels::OneBitLambFinish(const LambRange &, const LambHyper &, float) const {
  Unsupported("1-bit LAMB's exchange", "use Lamb with offload_optimizer cpu");
}

LambSums CudaKernels::LambMoments(const LambRange &, const LambHyper &) const {
  Unsupported("the Lamb optimizer", "set zero_optimization.offload_optimizer.device \"cpu\"");
  return {};
}

void CudaKernels::LambApply(const LambRange &, const LambHyper &, float) const {
  Unsupported("the Lamb optimizer", "set zero_optimization.offload_optimizer.device \"cpu\"");
}

void CudaKernels::CopyBytes(const void *src, size_t bytes, void *dst) const {
  Check(t_.copy_rows(ctx_, src, bytes, 1, bytes, dst, bytes), "CopyBytes");
}

void CudaKernels::Narrow16(Half h, const float *src, int64_t n, uint16_t *dst) const {
  Check(t_.narrow_16(ctx_, HalfCode(h), src, n, dst), "Narrow16");
}
void CudaKernels::AddInto16(Half h, const float *add, int64_t n, uint16_t *acc) const {
  Check(t_.add_into_16(ctx_, HalfCode(h), add, n, acc), "AddInto16");
}
void CudaKernels::AddWide16(Half h, const uint16_t *add, int64_t n, float *acc) const {
  Check(t_.add_wide_16(ctx_, HalfCode(h), add, n, acc), "AddWide16");
}
void CudaKernels::Sum16(Half h, const uint16_t *add, int64_t n, uint16_t *acc) const {
  Check(t_.sum_16(ctx_, HalfCode(h), add, n, acc), "Sum16");
}
double CudaKernels::SumOfSquares16(Half h, const uint16_t *x, int64_t n) const {
  double sum = 0;
  if (!ReadyForHostWait("SumOfSquares16")) return kNaN;
  const int code = t_.sum_of_squares_16(ctx_, HalfCode(h), x, n, &sum);
  Check(code, "SumOfSquares16");
  return code == 0 ? sum : std::numeric_limits<double>::quiet_NaN();
}

void CudaKernels::SgdUpdate(const float *grad, int64_t n, const SgdHyper &h, float *param,
                            float *momentum) const {
  // The constants as cpu::SgdUpdate rounds them to float.
  const DstCudaSgdConstants c{float(h.lr),           float(h.momentum),  float(1 - h.dampening),
                              float(h.weight_decay), h.nesterov ? 1 : 0, h.first_step ? 1 : 0};
  Check(t_.sgd(ctx_, grad, n, &c, param, h.momentum != 0 ? momentum : nullptr), "SgdUpdate");
}

}  // namespace dst

#undef DST_TABLE_HAS
