// ActivationStore: where each layer's saved activations live, per micro-batch,
// between its forward and its backward. The model owns one; layers only see
// the LayerActivations it hands them. Three policies:
//
//   keep, fp32      every slot holds every layer's tensors (the plain case).
//   keep, 16 bits   the tensors a layer saves are computed in one of two
//                   shared fp32 regions (even and odd layers, so a layer reads
//                   its predecessor's output while writing its own) and kept
//                   in 16 bits per slot from the end of its forward to its
//                   backward, which widens them back (2 bytes per value plus
//                   the two regions). Exact tensors stay fp32 per slot.
//   recompute       layers form groups of `recompute_interval` consecutive
//                   layers (DeepSpeed's activation_checkpoint_interval); a
//                   slot keeps only each group's output (the next group's
//                   input); everything else is computed in one shared work
//                   region holding one group, and the group's forward is run
//                   again right before the backward of its last layer (full
//                   activation checkpointing). Under 16-bit training the
//                   recomputed values are rounded exactly as the 16-bit keep
//                   policy rounds them, so the two agree bit for bit.
//
// Selective recomputation (with either keep policy) keeps the tensors a
// layer declares `recomputable` in one shared region instead of per slot; the
// layer rebuilds them (Layer::RecomputeSaved) before its backward.
//
// Zero-bubble schedules (split_backward) also keep, per slot, the gradients a
// layer's input half leaves for its weight half (Layer::DeferredTensors), in
// fp32, from the one to the other.
//
// A slot holds one micro-batch in flight; a schedule that runs k forwards
// before their backwards (1F1B: up to pp_size on the first stage) needs k.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/layers/layer.h"
#include "core/precision/half_ops.h"
#include "core/runtime/memory.h"

namespace dst {

struct ActivationOptions {
  int64_t slots = 1;               // micro-batches that can be in flight at once
  bool recompute = false;          // keep only group outputs; recompute the rest in backward
  int64_t recompute_interval = 1;  // layers per recomputed group (LayerSaveSpec::group)
  bool selective = false;          // recomputable tensors in one shared region
  std::optional<Half> half;        // 16-bit training: saved values on the 16-bit grid
  bool split_backward = false;     // keep each layer's deferred gradients per slot
  // 16-bit training with fp16/bf16_override_modules: the saved tensors of
  // these parts stay fp32 (exact), and a layer made only of them keeps its
  // output and input gradient fp32 too (SavedTensorSpec::module).
  ModuleSet fp32_modules;
  // bf16 training whose layers multiply in bf16 on a backend that keeps the
  // operands' bf16 copies (Kernels::KeepsBf16Copies; Model::Bf16Operands):
  // the tensors only those GEMMs read (SavedTensorSpec::operand_of) are kept
  // in the 16-bit stash alone and get no fp32 space (LeftToGemms).
  bool bf16_operands = false;
};

// What one layer saves: its tensors, and whether tensor 0 is its output (the
// next layer's input) rather than a value only its own backward reads.
struct LayerSaveSpec {
  std::vector<SavedTensorSpec> tensors;
  bool first_is_output = false;
  std::vector<SavedTensorSpec> deferred;  // Layer::DeferredTensors (split backward only)
  // Recompute policy: the layer's group; consecutive layers of one group
  // share it (the model numbers them within each model chunk).
  int64_t group = 0;
};

template <typename T>
class ActivationStore {
 public:
  ActivationStore() = default;
  // `memory`: where every region lives (null: host memory).
  ActivationStore(const std::vector<LayerSaveSpec> &layers, const ActivationOptions &options,
                  MemoryTracker *tracker, MemoryResource *memory = nullptr);
  // The bytes the constructor charges to kActivations for these layers and
  // options, without allocating them (`dstrain estimate`).
  static int64_t Bytes(const std::vector<LayerSaveSpec> &layers, const ActivationOptions &options);

  int64_t slots() const { return int64_t(acts_.size()); }
  const ActivationOptions &options() const { return options_; }
  LayerActivations<T> &at(int64_t slot, size_t layer) { return acts_[size_t(slot)][layer]; }
  const LayerActivations<T> &at(int64_t slot, size_t layer) const {
    return acts_[size_t(slot)][layer];
  }

  // The gradients `layer`'s input half keeps for its weight half (split_backward).
  LayerActivations<T> &deferred(int64_t slot, size_t layer) {
    return deferred_[size_t(slot)][layer];
  }

  // After `layer`'s forward in `slot` (also after a recomputation): rounds
  // its saved values onto the 16-bit grid and, under the 16-bit keep
  // policy, stores them in 16 bits. Returns whether its output was rounded
  // (otherwise the caller rounds it, if it wants 16-bit outputs). The
  // conversions run as kernels of `k` (where the tensors live). Without
  // `backward_follows` (an eval forward) only the output is rounded: nothing
  // will read the rest, so nothing is stashed.
  bool AfterForward(int64_t slot, size_t layer, const Kernels<T> &k, bool backward_follows = true);
  // Before `layer`'s backward in `slot`: true when its saved values are not
  // held and the caller must run its group's forward again (recompute policy).
  bool NeedsRecompute(int64_t slot, size_t layer) const;
  // Selective: true when the layer's recomputable tensors do not hold the
  // slot's values (the caller runs Layer::RecomputeSaved, then AfterRecomputeSaved).
  bool NeedsRecomputeSaved(int64_t slot, size_t layer) const;
  void AfterRecomputeSaved(int64_t slot, size_t layer, const Kernels<T> &k);
  // Before `layer`'s backward in `slot`: makes its saved values readable
  // again (16-bit keep policy: widens them into the shared region, but for
  // those LeftToGemms, read from the stash itself).
  void Restore(int64_t slot, size_t layer, const Kernels<T> &k);

 private:
  // Region sizes in elements (aligned per tensor).
  struct Sizes {
    int64_t own = 0;                     // per slot: the values a slot keeps
    int64_t shared[2] = {0, 0};          // the shared work regions
    int64_t transient = 0;               // selective: the recomputable tensors
    int64_t deferred = 0;                // per slot: split backward's deferred gradients
    std::vector<int64_t> stash_numel;    // [layer] 16-bit keep: its stash (unaligned)
    std::vector<bool> group_needs_work;  // [layer] recompute: its group keeps something shared
  };
  static Sizes Plan(const std::vector<LayerSaveSpec> &layers, const ActivationOptions &options);
  // The options as the store applies them (16-bit keep on fp32 models only;
  // full recomputation supersedes selective; at least one slot).
  static ActivationOptions Effective(ActivationOptions options);
  void AllocateDeferred(size_t slots, int64_t per_slot, MemoryTracker *tracker,
                        MemoryResource *memory);
  bool Keeps16() const { return options_.half.has_value() && !options_.recompute; }
  // Whether tensor i of `layer` is one whose bf16 copy the layer's GEMMs
  // write (forward) and read (backward) in the stash themselves, or its
  // producer writes there alone (SavedTensorSpec::operand_of, bf16_alone;
  // under bf16 keep, bf16_operands and no full recomputation, which reruns
  // the forward over fp32 values; not a tensor selective recomputation
  // rebuilds): the store neither stashes nor widens it.
  bool LeftToGemms(size_t layer, size_t i) const;
  // act.bf16: each stashed tensor's place in the layer's bf16 stash;
  // act.only16: those kept there alone (bf16_alone).
  void SetBf16Views(LayerActivations<T> &act, size_t layer, uint16_t *stash) const;
  struct Resident {  // one slot's values of one layer (16-bit keep) or group (recompute)
    int64_t slot = -1;
    int64_t unit = -1;
    bool is(int64_t s, int64_t u) const { return slot == s && unit == u; }
  };

  ActivationOptions options_;
  std::vector<LayerSaveSpec> specs_;
  std::vector<std::vector<LayerActivations<T>>> acts_;  // [slot][layer]
  std::vector<Buffer<T>> own_;                          // [slot] values a slot keeps in fp32
  Buffer<T> shared_[2];                                 // 16-bit keep: [even / odd layers];
                                                        // recompute: [0] the work region
  std::vector<std::vector<Buffer<uint16_t>>> stash_;    // 16-bit keep: [slot][layer]
  Resident resident_[2];  // which (slot, layer / group) each shared region holds
  Buffer<T> transient_;   // selective: [max over layers] the recomputable tensors
  Resident transient_resident_;
  std::vector<bool> group_needs_work_;  // [layer] recompute: its group keeps something shared
  std::vector<std::vector<LayerActivations<T>>> deferred_;  // [slot][layer] split backward
  std::vector<Buffer<T>> deferred_own_;                     // [slot]
};

}  // namespace dst
