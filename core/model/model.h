// Model<T>: the ordered layers of a model spec, the flat parameter store they
// use, and the buffers that carry gradients between them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/common/status.h"
#include "core/model/activation_store.h"
#include "core/model/kv_cache.h"
#include "core/layers/layer.h"
#include "core/model/model_spec.h"
#include "core/layers/params.h"
#include "core/precision/half_ops.h"
#include "core/model/tp_plan.h"

namespace dst {

// Trainable parameters of a spec (tied weights once), without allocating.
int64_t CountParameters(const ModelSpec &spec);
// The parameter declarations of a spec (names, shapes, flat offsets), without allocating.
std::vector<ParamDecl> DeclareParameters(const ModelSpec &spec);

// What a stage partitioner knows of one layer of the whole model.
struct LayerSummary {
  std::string kind;        // Layer::Kind(): "gpt_embedding", "gpt_transformer_block", "linear", ...
  int64_t parameters = 0;  // declared by the layer
  double forward_flops = 0;  // one micro-batch of B x seq
};
// The layers of a whole model, in order (GPT: embedding, blocks, head).
std::vector<LayerSummary> SummarizeLayers(const ModelSpec &spec, int64_t B, int64_t seq);

// The parameters one layer touches: the flat range [begin, end) of the
// tensors it declared, and the ids of every tensor it reads or writes (its own
// in order, then tied ones declared by another layer, like the GPT head's wte).
struct LayerParamUse {
  int64_t begin = 0, end = 0;
  std::vector<int> ids;
};

// What a layer was doing between two instants (LayerTimer).
enum class LayerPass { kForward, kRecompute, kBackward, kBackwardInput, kBackwardWeight };
const char *LayerPassName(LayerPass pass);  // "forward", "recompute", "backward", ...

// Told the span of each layer's computation (not its hooks' gathers and
// reductions) while set on a model: the step trace and the flops profiler.
// Local layer indices; on the thread that runs the model.
class LayerTimer {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~LayerTimer() = default;
  virtual void Record(LayerPass pass, size_t layer, int64_t micro_rows, TimePoint begin,
                      TimePoint end) = 0;
};

// Called by Model::Forward/Backward around each layer, e.g. to gather a
// layer's parameters before it runs (ZeRO stage 3) and to reduce its
// gradients once its backward is done. A hook that fails stops the pass
// where it happened: the model returns its Status at once.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual Status BeforeForward(size_t layer) {
    (void)layer;
    return Status::Ok();
  }
  virtual Status BeforeBackward(size_t layer) {
    (void)layer;
    return Status::Ok();
  }
  virtual Status AfterBackward(size_t layer) {
    (void)layer;
    return Status::Ok();
  }
  // Split backward (zero-bubble schedules): before a layer's input half
  // (it reads the layer's parameters, writes no parameter gradient), and
  // before its weight half (it writes the parameter gradients and reads no
  // parameter). AfterBackward follows the weight half. A recomputation
  // before either (or before a whole backward) calls BeforeForward for each
  // layer it runs again.
  virtual Status BeforeInputGradient(size_t layer) {
    (void)layer;
    return Status::Ok();
  }
  virtual Status BeforeWeightGradient(size_t layer) {
    (void)layer;
    return Status::Ok();
  }
  // Mixed precision: the 16-bit format fp32 activations are rounded onto
  // (through the model's kernels); Model<float> rounds every layer's output
  // and input gradient, so what crosses a layer boundary is a 16-bit value.
  // None: leave them alone.
  virtual std::optional<Half> activation_half() const { return std::nullopt; }
};

// A contiguous run of layers [begin, end): the whole model, or a pipeline stage.
struct LayerRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// The part of a model one rank builds: contiguous runs of the whole model's
// layers (its pipeline stage, or with interleaving its v model chunks), in
// global layer indices. Empty: the whole model. The model's local layers are
// the chunks' layers in order; chunk c runs as one LayerRange (chunk(c)).
// Tensors keep their single-rank names and initial values; a part holding
// the GPT head but not the embedding declares its own copy of the tied wte.
// With tensor parallelism (`tp`), each layer's tensors are this tp rank's
// slices of the global ones (core/tensor_parallel).
struct ModelPart {
  std::vector<LayerRange> chunks;
  TensorParallelGroup tp;
};

// The tensors a part of the model (ModelPart::chunks, global layer ranges;
// empty = the whole model) declares, without allocating; at tensor-parallel
// size `tp`, each a tp rank's slice (all ranks' slices are the same size).
std::vector<ParamDecl> DeclarePartParameters(const ModelSpec &spec,
                                             const std::vector<LayerRange> &chunks, int64_t tp = 1);
// The same, with the tensors each layer reads (ZeRO 3's gather per layer).
std::vector<ParamDecl> DeclarePartParameters(const ModelSpec &spec,
                                             const std::vector<LayerRange> &chunks, int64_t tp,
                                             std::vector<LayerParamUse> *uses);
// The bytes a rank's model of these chunks (all: the whole model) at
// tensor-parallel size `tp` (with sequence parallelism or not) charges to
// kActivations — its activation store under `activations` and its work
// buffers — computed without building it: what `dstrain estimate` prints
// and a run measures.
int64_t ActivationBytes(const ModelSpec &spec, const std::vector<LayerRange> &chunks,
                        const ActivationLimits &limits, const ActivationOptions &activations,
                        int64_t tp, bool sequence_parallel = false);
// Elements the layers of `chunks` (global ranges; empty = the whole model)
// save for one micro-batch of `limits` between forward and backward (the
// fp32 keep policy's per-slot size); with `deferred`, also the gradients a
// split backward keeps from its input half to its weight half (zero bubble).
int64_t SavedActivationElements(const ModelSpec &spec, const std::vector<LayerRange> &chunks,
                                const ActivationLimits &limits, bool deferred = false,
                                int64_t tp = 1, bool sequence_parallel = false);

template <typename T>
class Model {
 public:
  // Builds the layers, allocates the flat buffers `store` asks for (padded
  // to a multiple of store.pad_multiple, the dp size), initialises the
  // weights from spec.seed, and allocates the activation store: `activations`
  // says how many micro-batches can be in flight and how their saved values
  // are kept (ActivationStore), each slot sized for `limits`.
  // `memory`: where the parameters, gradients, activations and work buffers
  // live (null: host memory); the kernels (SetKernels) must reach it.
  Model(const ModelSpec &spec, const ActivationLimits &limits, MemoryTracker *tracker,
        const ParamStoreOptions &store = {}, const ActivationOptions &activations = {},
        const ModelPart &part = {}, MemoryResource *memory = nullptr);

  // Runs layers [range.begin, range.end) forward on the micro-batch held in
  // activation slot `slot` (0 <= slot < activation_slots()). `input` is the
  // range's input [rows, width] when it does not start at layer 0 (a pipeline
  // stage's received activations); it must stay valid until the slot's
  // backward. *output (if given) receives the last layer's output, valid
  // until the next Forward or Backward. A failing hook stops the pass.
  Status Forward(int64_t slot, LayerRange range, const T *input, MicroBatch<T> &mb,
                 LayerHooks *hooks, const T **output = nullptr);
  // Runs the same range backward on the same slot, accumulating parameter
  // gradients (scaled by mb.grad_scale). dout: gradient of the range's output
  // (null when the range ends with the loss layer; may be overwritten). din:
  // where to write the gradient of the range's input, or null.
  Status Backward(int64_t slot, LayerRange range, T *dout, T *din, MicroBatch<T> &mb,
                  LayerHooks *hooks);
  // The backward in two halves (a model built with
  // ActivationOptions::split_backward): BackwardInput takes the arguments of
  // Backward and computes the input gradients only; BackwardWeight, later,
  // accumulates the same range's parameter gradients. The slot stays taken
  // until the weight half.
  Status BackwardInput(int64_t slot, LayerRange range, T *dout, T *din, MicroBatch<T> &mb,
                       LayerHooks *hooks);
  Status BackwardWeight(int64_t slot, LayerRange range, MicroBatch<T> &mb, LayerHooks *hooks);
  // The loss the slot's last forward through the loss layer computed (NaN
  // when it went into the loss sum: MicroBatch::loss_sum).
  double Loss(int64_t slot) const { return activations_.at(slot, layers_.size() - 1).loss; }
  // The loss layer adds each micro-batch's mean loss into one double where
  // the kernels run (loss_sum(), for MicroBatch::loss_sum) when it
  // DefersLoss: the engine's programs zero it as a step begins and read it
  // once (a host wait on a device) as it ends, instead of after every
  // micro-batch's forward.
  bool defers_loss() const { return has_loss() && layers_.back()->DefersLoss(); }
  double *loss_sum() { return loss_sum_.data(); }  // null unless defers_loss()
  void ZeroLossSum();
  Result<double> ReadLossSum();

  // Every layer, slot 0: returns the micro-batch's mean loss.
  Result<double> Forward(MicroBatch<T> &mb, LayerHooks *hooks = nullptr);
  Status Backward(MicroBatch<T> &mb, LayerHooks *hooks = nullptr);

  LayerRange all_layers() const { return {0, layers_.size()}; }
  // Model chunk c of the part (local layer indices); chunk 0 is everything
  // when the model was built whole.
  LayerRange chunk(size_t c) const { return chunks_[c]; }
  size_t num_chunks() const { return chunks_.size(); }
  // The whole model's index of local layer i.
  size_t global_layer(size_t i) const { return global_layers_[i]; }
  // Whether local layer i is the loss layer (the last stage's last layer).
  bool has_loss() const { return !layers_.empty() && layers_.back()->IsLoss(); }
  // Width of the activations entering local layer i ([rows, width]); 0 for
  // the GPT embedding (it reads tokens).
  int64_t InWidth(size_t i) const;
  // The rows of the activations between layers (and stages) for a
  // micro-batch of `rows` token rows (a sequential model's samples): this
  // rank's share under sequence parallelism, else all of them; the model's
  // first layer reads this rank's rows of the input.
  int64_t BoundaryRows(int64_t rows) const { return rows / row_split_; }
  int64_t row_split() const { return row_split_; }
  // Rows of local layer i's output / input for a micro-batch of `rows` rows:
  // BoundaryRows, but every row inside a tensor-parallel region (a
  // sequential model's column-parallel Linear and the element-wise layers on
  // its slice).
  int64_t OutRows(size_t i, int64_t rows) const;
  int64_t InRows(size_t i, int64_t rows) const;
  int64_t activation_slots() const { return activations_.slots(); }
  // After layer i's backward, the lowest flat offset whose gradients can
  // still change: everything at or above it is final.
  int64_t GradientsFinalBoundary(size_t layer) const {
    return layer == 0 ? 0 : first_offset_[layer];
  }
  // Per layer: the parameters it touches.
  const std::vector<LayerParamUse> &layer_params() const { return layer_params_; }

  ParamStore<T> &params() { return *store_; }
  const ParamStore<T> &params() const { return *store_; }
  const ModelSpec &spec() const { return spec_; }
  const ActivationLimits &limits() const { return limits_; }
  const std::vector<std::unique_ptr<Layer<T>>> &layers() const { return layers_; }
  // Forward FLOPs of one micro-batch of B samples of T tokens.
  double ForwardFlops(int64_t B, int64_t seq) const;
  // Times every layer's passes while set (null: none, the default).
  void SetLayerTimer(LayerTimer *timer) { timer_ = timer; }
  // Generation: every forward runs its attention layers over `cache`
  // (MicroBatch::kv, MicroBatch::position = cache->length()); null: none,
  // the default. The cache must be built for this model's layers
  // (KvCacheWidths) and outlive its use.
  void SetKvCache(const KvCache<T> *cache) { kv_cache_ = cache; }
  // Per local layer, Layer::KvCacheWidth.
  std::vector<int64_t> KvCacheWidths() const;
  // What the layers' GEMMs multiply in (every pass's MicroBatch::compute).
  void SetComputeType(ComputeType compute) { compute_ = compute; }
  // The layers' bf16 GEMMs keep their operands' bf16 copies in the 16-bit
  // stash themselves (SavedTensorSpec::operand_of): bf16 compute on a backend
  // that keeps them.
  bool Bf16Operands() const {
    return compute_ == ComputeType::kBf16 && kernels_->KeepsBf16Copies();
  }
  ComputeType compute_type() const { return compute_; }
  // The backend every pass's layers run their kernels through
  // (MicroBatch::kernels); the CPU one unless set. It must outlive the model.
  void SetKernels(const Kernels<T> &kernels) { kernels_ = &kernels; }
  const Kernels<T> &kernels() const { return *kernels_; }

 private:
  void RoundActivations(LayerHooks *hooks, const T *data, int64_t n) const;
  Status TakeErrors(size_t layer);
  // Runs layer i forward on `in` into the slot's activations.
  Status ForwardLayer(size_t i, int64_t slot, const T *in, MicroBatch<T> &mb, LayerHooks *hooks,
                      LayerPass pass);
  // The input layer i read in the slot's forward.
  const T *InputOf(size_t i, int64_t slot, LayerRange range, const MicroBatch<T> &mb) const;
  void Prepare(MicroBatch<T> &mb);
  // Whether (slot, range) name a slot and a non-empty range of the model.
  Status CheckPass(const char *what, int64_t slot, LayerRange range) const;
  // Before layer i's backward (or a half of it) in `slot`: runs its
  // recomputation group's forward again when the store does not hold it,
  // or (selective) rebuilds its recomputable tensors.
  Status EnsureSaved(size_t i, int64_t slot, LayerRange range, MicroBatch<T> &mb, LayerHooks *hooks,
                     bool recomputable_too);
  enum class BackwardHalf { kWhole, kInput };
  Status RunBackward(BackwardHalf half, int64_t slot, LayerRange range, T *dout, T *din,
                     MicroBatch<T> &mb, LayerHooks *hooks);

  ModelSpec spec_;
  ActivationLimits limits_;
  int64_t row_split_ = 1;  // sequence parallelism: tp (BoundaryRows)
  int64_t row_rank_ = 0;
  std::vector<bool> all_rows_;  // per global layer (BuiltLayers::all_rows)   // sequence
                                // parallelism: which rows of the model's input are this rank's
  std::vector<std::unique_ptr<Layer<T>>> layers_;
  std::vector<LayerRange> chunks_;     // local layer ranges, one per model chunk
  std::vector<size_t> global_layers_;  // per local layer: its index in the whole model
  std::vector<bool> fp32_layers_;      // per local layer: KeptFp32 (outputs not rounded)
  std::vector<int64_t> in_widths_;     // per local layer: width of its input (0: tokens)
  std::vector<int64_t> first_offset_;  // per layer: lowest offset of the params it writes
  std::vector<size_t> group_begin_;    // per layer: first layer of its recomputation group
  std::vector<size_t> group_end_;      // per layer: one past the last layer of its group
  std::vector<LayerParamUse> layer_params_;
  LayerTimer *timer_ = nullptr;
  const KvCache<T> *kv_cache_ = nullptr;
  ComputeType compute_ = ComputeType::kFp32;
  const Kernels<T> *kernels_ = &HostKernels<T>();
  std::unique_ptr<ParamStore<T>> store_;
  ActivationStore<T> activations_;
  std::vector<const T *> range_input_;  // [slot] the external input of the slot's forward
  Buffer<T> grad_a_, grad_b_;           // [max_rows, max width] ping-pong input/output gradients
  Buffer<T> scratch_;                   // [max over layers of ScratchSize]
  Buffer<double> loss_sum_;             // [1] defers_loss(): the step's summed losses
};

}  // namespace dst
