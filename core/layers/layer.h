// A model is an ordered list of layers, each with an explicit forward and
// backward (no autograd tape), like DeepSpeed's PipelineModule(layers=[...]).
// A layer holds no activations: it declares the tensors its backward needs
// (SavedTensors), and its forward and backward read and write one
// micro-batch's copy of them (LayerActivations), owned by the model's
// ActivationStore. Several micro-batches can therefore be in flight at once
// (what a 1F1B pipeline schedule needs), and where the values live between
// forward and backward (fp32, 16 bits, or nowhere: recomputed) is the
// store's policy, not the layer's.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "core/common/status.h"
#include "core/kernels/compute_type.h"
#include "core/kernels/kernels.h"
#include "core/layers/module_type.h"
#include "core/layers/params.h"
#include "core/runtime/memory.h"

namespace dst {

// One micro-batch as the layers see it. Rows of an activation are B*T tokens
// for a GPT and B samples for a sequential model (seq = 1).
template <typename T>
struct MicroBatch {
  int64_t B = 0;
  int64_t seq = 1;
  const int32_t *tokens = nullptr;   // GPT: [B, T]
  const int32_t *targets = nullptr;  // GPT: [B, T]; sequential cross-entropy: [B]
  const T *inputs = nullptr;         // sequential: [B, input_dim]
  const T *labels = nullptr;         // sequential MSE: [B, output_dim]
  T grad_scale = 1;                  // d(step loss)/d(this micro-batch's loss) = 1/accumulation
  T *scratch = nullptr;              // shared backward workspace (Layer::ScratchSize)
  int max_threads = 1;
  ComputeType compute = ComputeType::kFp32;  // what the layers' GEMMs multiply in (ComputeType)
  ModuleSet fp32_modules;  // fp16/bf16_override_modules: these multiply in fp32 whatever `compute`
  // False for a forward no backward follows (an eval program): the saved
  // tensors other than the output need not be kept (16-bit stash skipped).
  bool backward_follows = true;
  // The backend the layers run their kernels through (kernels.h): where the
  // pointers above and the activations live. The model sets it (Prepare).
  const Kernels<T> *kernels = &HostKernels<T>();
  // Generation (a forward no backward follows): the tokens are at positions
  // [position, position + seq) of their sequences (learned and rotary
  // positions count from it), and `kv` is the running layer's key/value
  // cache, holding positions [0, position) (Model sets it per layer from its
  // KvCache); the attention then reads its keys and values there. Null: the
  // micro-batch's own tokens are the whole sequences (training).
  int64_t position = 0;
  const KvCacheView<T> *kv = nullptr;
  // Where the loss layer writes the logits of the true vocabulary (not its
  // padding) when set: [B, V] of each sequence's last token with
  // `last_logits_only`, else [B * seq, V]. The loss is then computed only
  // when targets are given.
  T *logits = nullptr;
  bool last_logits_only = false;
  // Set (with `counted`, the targets not ignored, counted on the host): a
  // loss layer that DefersLoss adds its mean loss into *loss_sum (one double
  // where the kernels run) instead of reading it back, so the host does not
  // wait for each micro-batch's forward (Model::ReadLossSum reads the sum).
  double *loss_sum = nullptr;
  int64_t counted = 0;
  int64_t rows() const { return B * seq; }
  // What the GEMMs of a layer's part of type `m` multiply in.
  ComputeType ComputeOf(ModuleType m) const {
    return fp32_modules.has(m) ? ComputeType::kFp32 : compute;
  }
};

// The largest micro-batch a layer must hold activations for.
struct ActivationLimits {
  int64_t max_B = 1;
  int64_t max_T = 1;
  int max_threads = 1;
  // The attention kernels' backend keeps the softmax probabilities between
  // forward and backward (Kernels::KeepsAttentionProbabilities; false: a
  // fused GPU kernel, and the blocks save no T x T tensor).
  bool attention_probabilities = true;
  int64_t max_rows() const { return max_B * max_T; }
};

// One tensor a layer saves in forward for its backward, sized for the limits.
struct SavedTensorSpec {
  int64_t numel = 0;
  // Kept in fp32 even when the store keeps activations in 16 bits
  // (LayerNorm statistics, softmax probabilities: small or precision-critical).
  bool exact = false;
  // The layer's RecomputeSaved can rebuild it from its other saved tensors:
  // selective recomputation keeps it in one shared region instead of per
  // micro-batch (the attention probabilities of a transformer block).
  bool recomputable = false;
  // The part of the layer that produces it (module_type.h). Under 16-bit
  // training with an override list (fp16_override_modules) the tensors of a
  // listed part stay fp32, and kWhole tensors (outputs, residual sums) do
  // when every part of the layer is listed.
  ModuleType module = ModuleType::kWhole;
  // Set when the layer reads it only as an operand of the GEMMs of this part
  // (after the forward that writes it: the same layer's forward GEMM, its
  // backward's) or through kernels reading its bf16 copy (*Stashed: the GELU
  // backward its input's): where that part multiplies in bf16 on a backend
  // that keeps bf16 copies (Kernels::KeepsBf16Copies), the forward rounds it
  // into its place in the 16-bit stash (LayerActivations::bf16) and the
  // backward reads it there, so the store neither stashes nor widens it, and its
  // fp32 copy is not read after the forward (see bf16_alone). The model
  // clears it for a part kept in fp32 (fp32_modules).
  std::optional<ModuleType> operand_of = std::nullopt;
  // With operand_of: it need not be kept in fp32 at all, because its producer
  // can write the bf16 copy alone (LayerNorm, the softmax, GELU) or the layer
  // writes the fp32 values in its scratch, where its reader rounds them (a
  // GEMM's fp32 output). Where the GEMMs keep their operands' copies it is
  // then kept in the 16-bit stash alone: no fp32 space, and the layer writes
  // only the copy there (LayerActivations::only16).
  bool bf16_alone = false;
};

// A saved tensor as its producer writes it and its readers read it: the
// fp32 values (null when only the bf16 copy is kept) and the bf16 copy in
// the 16-bit stash (null when there is none; LayerActivations::bf16).
template <typename T>
struct Operand {
  T *fp32 = nullptr;
  uint16_t *bf16 = nullptr;
  bool only16 = false;
  // What a producer writes: the bf16 copy alone when that is all that is
  // kept (else null: the reader's GEMM or the store rounds the fp32 values).
  uint16_t *Bf16Only() const { return only16 ? bf16 : nullptr; }
  // The operand after a GEMM that multiplied it in bf16 on a backend keeping
  // bf16 copies (`wrote`) has written its copy: the next GEMM reads the copy
  // (fp32 null) instead of rounding the values again.
  Operand AfterGemm(bool wrote) const {
    return wrote && bf16 != nullptr ? Operand{nullptr, bf16, true} : *this;
  }
  // Plain fp32 values with no copy (a gathered or scratch tensor).
  static Operand Of(T *x) { return {x, nullptr, false}; }
};

// One micro-batch's saved activations of one layer: a pointer per tensor the
// layer declared (in its order), and the loss of a loss layer.
template <typename T>
struct LayerActivations {
  std::vector<T *> tensors;
  // Per tensor, where the store keeps it in bf16 (bf16 training's 16-bit
  // stash): the same values as tensors[i] from the end of the forward to the
  // backward (the stash is written as the fp32 copy is rounded onto the bf16
  // grid, or by the forward GEMM that rounds it: SavedTensorSpec::operand_of).
  // Empty, or null for a tensor kept otherwise. bf16 GEMMs read it instead
  // of rounding tensors[i] again (Kernels::*Stashed, *Stashing).
  std::vector<uint16_t *> bf16;
  // Per tensor, 1 where only its bf16 copy is written and read
  // (SavedTensorSpec::bf16_alone, where the store leaves it to the GEMMs): its
  // producer writes bf16[i] alone, and tensors[i] is null (no fp32 space).
  std::vector<uint8_t> only16;
  double loss = 0;      // loss layers: the mean loss of this micro-batch
  int64_t counted = 0;  // loss layers: targets that were not ignored
  T *operator[](size_t i) const { return tensors[i]; }
  Operand<T> Op(size_t i) const { return {tensors[i], Bf16(i), Only16(i)}; }
  uint16_t *Bf16(size_t i) const { return i < bf16.size() ? bf16[i] : nullptr; }
  bool Only16(size_t i) const { return i < only16.size() && only16[i] != 0; }
  // What a producer writes: the fp32 tensor (null when only the bf16 copy
  // is kept) and the bf16 copy when that is all that is kept (else null: the
  // consumer's GEMM or the store rounds the fp32 tensor).
  T *Fp32(size_t i) const { return Only16(i) ? nullptr : tensors[i]; }
  uint16_t *Bf16Only(size_t i) const { return Only16(i) ? bf16[i] : nullptr; }
};

template <typename T>
class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string_view Kind() const = 0;
  // Features per row of the output (0 for a loss layer).
  virtual int64_t OutWidth() const = 0;
  // The tensors Forward fills and Backward reads, for micro-batches up to
  // `limits`. A layer with an output declares it first (tensor 0): the next
  // layer reads it as its input.
  virtual std::vector<SavedTensorSpec> SavedTensors(const ActivationLimits &limits) const = 0;
  // Elements of shared scratch the forward or backward needs (the model
  // allocates the max; nothing in it outlives a call).
  virtual int64_t ScratchSize(const ActivationLimits &) const { return 0; }
  // in: the previous layer's output [rows, in_width] (unused by a first layer
  // that reads the batch). Writes the saved tensors of `act`, the output
  // [rows, OutWidth()] in act[0] (a loss layer sets act.loss instead).
  // Forward is a pure function of (in, parameters, batch): run again on the
  // same inputs it writes the same bits (recomputation relies on it).
  virtual void Forward(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) = 0;
  // in: the same input Forward saw. dout: gradient of the output [rows,
  // OutWidth()] (null for a loss layer); the layer may overwrite it. din:
  // where to write the input gradient [rows, in_width], or null when nobody
  // needs it. Parameter gradients are accumulated (+=) into the store.
  virtual void Backward(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                        const MicroBatch<T> &mb) = 0;
  // Zero-bubble schedules split the backward in two halves. BackwardInput
  // computes the input gradient only (din, dout as in Backward) and keeps in
  // `deferred` (the tensors DeferredTensors declares, one set per
  // micro-batch in flight) what BackwardWeight needs to accumulate the
  // parameter gradients later, once other micro-batches have run. `in` and
  // `act` are the same in both halves. A layer with parameters must override
  // all three (and declare at least one deferred tensor); one without keeps
  // the defaults: the whole backward in the input half, nothing after.
  virtual std::vector<SavedTensorSpec> DeferredTensors(const ActivationLimits &) const {
    return {};
  }
  virtual void BackwardInput(const T *in, const LayerActivations<T> &act, T *dout, T *din,
                             LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
    (void)deferred;
    Backward(in, act, dout, din, mb);
  }
  virtual void BackwardWeight(const T *in, const LayerActivations<T> &act,
                              const LayerActivations<T> &deferred, const MicroBatch<T> &mb) {
    (void)in, (void)act, (void)deferred, (void)mb;
  }
  virtual bool IsLoss() const { return false; }
  // A loss layer that honours MicroBatch::loss_sum.
  virtual bool DefersLoss() const { return false; }
  // Selective recomputation: rebuilds the tensors declared `recomputable` in
  // `act` from its other saved tensors (and `in`), exactly as Forward wrote
  // them; called before Backward / BackwardInput when they were not kept
  // (BackwardWeight must not read them). May use mb.scratch.
  virtual void RecomputeSaved(const T *in, LayerActivations<T> &act, const MicroBatch<T> &mb) {
    (void)in, (void)act, (void)mb;
  }
  // The module types this layer's parameters belong to (module_type.h);
  // none for a layer without parameters.
  virtual ModuleSet Modules() const { return {}; }
  // Generation: the values per position and sequence this layer keeps in a
  // key/value cache (an attention layer's kv heads x head size; 0: none).
  virtual int64_t KvCacheWidth() const { return 0; }
  // Floating-point operations of one forward over rows (GEMMs counted as 2mnk).
  virtual double ForwardFlops(int64_t B, int64_t seq) const = 0;

  void Bind(ParamStore<T> *store) { store_ = store; }
  // A layer that communicates (tensor parallelism) records a failed
  // collective and stops its pass; the model takes the error after each call
  // and returns it.
  Status TakeError() { return std::exchange(error_, Status::Ok()); }

 protected:
  void Fail(Status status) {
    if (error_.ok()) error_ = std::move(status);
  }
  ParamStore<T> *store_ = nullptr;

 private:
  Status error_;
};

}  // namespace dst
