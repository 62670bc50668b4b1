#include "core/model/activation_store.h"

#include <algorithm>
#include <type_traits>

namespace dst {

namespace {

constexpr int64_t kAlign = 16;  // elements: keeps every tensor 64-byte aligned

int64_t Aligned(int64_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

// Whether tensor k of a layer is its output (kept per slot under recompute).
bool IsOutput(const LayerSaveSpec &spec, size_t k) {
  return k == 0 && spec.first_is_output;
}

// Where a tensor lives: kept per slot, in the shared work region(s), or in
// the transient region (selective recomputation).
// kStash: in the 16-bit stash alone (SavedTensorSpec::bf16_alone).
enum class Home { kOwn, kShared, kTransient, kStash };

// Under the 16-bit keep policy (bf16), tensor t is read after its forward
// only by GEMMs that multiply in bf16 and read its stashed copy
// (ActivationStore::LeftToGemms). Not a tensor selective recomputation
// rebuilds (it lives in fp32 in the transient region).
bool ReadAsBf16Operand(const SavedTensorSpec &t, const ActivationOptions &options) {
  return options.bf16_operands && options.half == Half::kBf16 && !options.recompute &&
         !(options.selective && t.recomputable) && t.operand_of.has_value() && !t.exact;
}

// And its producer writes only the bf16 copy: it has no fp32 tensor.
bool StashOnly(const SavedTensorSpec &t, const ActivationOptions &options) {
  return ReadAsBf16Operand(t, options) && t.bf16_alone;
}

template <typename T>
Home HomeOf(const LayerSaveSpec &spec, size_t k, bool group_last,
            const ActivationOptions &options) {
  if (options.recompute) return IsOutput(spec, k) && group_last ? Home::kOwn : Home::kShared;
  if (options.selective && spec.tensors[k].recomputable) return Home::kTransient;
  if (options.half.has_value() && std::is_same_v<T, float>) {
    if (spec.tensors[k].exact) return Home::kOwn;
    return StashOnly(spec.tensors[k], options) ? Home::kStash : Home::kShared;
  }
  return Home::kOwn;
}

bool StartsGroup(const std::vector<LayerSaveSpec> &layers, size_t l) {
  return l == 0 || layers[l - 1].group != layers[l].group;
}

bool EndsGroup(const std::vector<LayerSaveSpec> &layers, size_t l) {
  return l + 1 == layers.size() || layers[l + 1].group != layers[l].group;
}

}  // namespace

template <typename T>
typename ActivationStore<T>::Sizes ActivationStore<T>::Plan(
    const std::vector<LayerSaveSpec> &layers, const ActivationOptions &options) {
  const size_t L = layers.size();
  auto home = [&](size_t l, size_t k) {
    return HomeOf<T>(layers[l], k, EndsGroup(layers, l), options);
  };
  // Per slot (own), per shared region (one layer's under 16-bit keep,
  // alternating; one group's under recompute), the transient region.
  Sizes z;
  int64_t group_shared = 0;
  z.stash_numel.assign(L, 0);
  z.group_needs_work.assign(L, false);
  for (size_t l = 0; l < L; ++l) {
    int64_t layer_shared = 0, layer_transient = 0;
    for (size_t k = 0; k < layers[l].tensors.size(); ++k) {
      const int64_t n = layers[l].tensors[k].numel;
      switch (home(l, k)) {
        case Home::kOwn:
          z.own += Aligned(n);
          break;
        case Home::kShared:
          layer_shared += Aligned(n);
          z.stash_numel[l] += n;
          break;
        case Home::kTransient:
          layer_transient += Aligned(n);
          break;
        case Home::kStash:
          z.stash_numel[l] += n;
          break;
      }
    }
    z.transient = std::max(z.transient, layer_transient);
    if (options.recompute) {
      if (StartsGroup(layers, l)) group_shared = 0;
      group_shared += layer_shared;
      z.shared[0] = std::max(z.shared[0], group_shared);
    } else {
      z.shared[l % 2] = std::max(z.shared[l % 2], layer_shared);
    }
    if (options.split_backward)
      for (const SavedTensorSpec &t : layers[l].deferred) z.deferred += Aligned(t.numel);
  }
  if (options.recompute) {  // a group needs recomputing when one of its layers keeps less
    for (size_t l = 0, begin = 0; l < L; ++l) {
      if (StartsGroup(layers, l)) begin = l;
      if (!EndsGroup(layers, l)) continue;
      bool needs = false;
      for (size_t j = begin; j <= l; ++j) needs |= z.stash_numel[j] > 0;
      for (size_t j = begin; j <= l; ++j) z.group_needs_work[j] = needs;
    }
  }
  return z;
}

template <typename T>
ActivationOptions ActivationStore<T>::Effective(ActivationOptions options) {
  if constexpr (!std::is_same_v<T, float>) options.half.reset();  // 16 bits: fp32 models only
  if (options.recompute) options.selective = false;  // full recomputation rebuilds everything
  options.slots = std::max<int64_t>(1, options.slots);
  return options;
}

template <typename T>
int64_t ActivationStore<T>::Bytes(const std::vector<LayerSaveSpec> &layers,
                                  const ActivationOptions &requested) {
  const ActivationOptions options = Effective(requested);
  const Sizes z = Plan(layers, options);
  int64_t stash = 0;
  if (options.half.has_value() && !options.recompute)
    for (const int64_t n : z.stash_numel) stash += n;
  const int64_t per_slot = int64_t(sizeof(T)) * (z.own + z.deferred) + 2 * stash;
  return int64_t(sizeof(T)) * (z.shared[0] + z.shared[1] + z.transient) + options.slots * per_slot;
}

template <typename T>
ActivationStore<T>::ActivationStore(const std::vector<LayerSaveSpec> &layers,
                                    const ActivationOptions &options, MemoryTracker *tracker,
                                    MemoryResource *memory)
    : options_(Effective(options)), specs_(layers) {
  const auto cat = MemoryCategory::kActivations;
  const size_t L = layers.size();
  const size_t slots = size_t(options_.slots);
  auto home = [&](size_t l, size_t k) {
    return HomeOf<T>(layers[l], k, EndsGroup(layers, l), options_);
  };
  const Sizes z = Plan(layers, options_);
  group_needs_work_ = z.group_needs_work;
  for (int r = 0; r < 2; ++r)
    if (z.shared[r] > 0) shared_[r] = Buffer<T>(tracker, cat, size_t(z.shared[r]), memory);
  if (z.transient > 0) transient_ = Buffer<T>(tracker, cat, size_t(z.transient), memory);

  acts_.resize(slots);
  own_.resize(slots);
  if (Keeps16()) stash_.resize(slots);
  for (size_t s = 0; s < slots; ++s) {
    own_[s] = Buffer<T>(tracker, cat, size_t(z.own), memory);
    int64_t own_offset = 0, shared_offset = 0;
    acts_[s].resize(L);
    for (size_t l = 0; l < L; ++l) {
      const int region = options_.recompute ? 0 : int(l % 2);
      if (!options_.recompute || StartsGroup(layers, l)) shared_offset = 0;
      int64_t transient_offset = 0;
      LayerActivations<T> &act = acts_[s][l];
      act.tensors.resize(layers[l].tensors.size());
      for (size_t k = 0; k < layers[l].tensors.size(); ++k) {
        const int64_t n = Aligned(layers[l].tensors[k].numel);
        switch (home(l, k)) {
          case Home::kOwn:
            act.tensors[k] = own_[s].data() + own_offset;
            own_offset += n;
            break;
          case Home::kShared:
            act.tensors[k] = shared_[region].data() + shared_offset;
            shared_offset += n;
            break;
          case Home::kTransient:
            act.tensors[k] = transient_.data() + transient_offset;
            transient_offset += n;
            break;
          case Home::kStash:  // no fp32 tensor (LayerActivations::only16)
            act.tensors[k] = nullptr;
            break;
        }
      }
      if (Keeps16()) {
        stash_[s].emplace_back(tracker, cat, size_t(z.stash_numel[l]), memory);
        if (*options_.half == Half::kBf16) SetBf16Views(act, l, stash_[s].back().data());
      }
    }
  }
  if (options_.split_backward) AllocateDeferred(slots, z.deferred, tracker, memory);
}

template <typename T>
void ActivationStore<T>::AllocateDeferred(size_t slots, int64_t per_slot, MemoryTracker *tracker,
                                          MemoryResource *memory) {
  deferred_.resize(slots);
  deferred_own_.resize(slots);
  for (size_t s = 0; s < slots; ++s) {
    deferred_own_[s] = Buffer<T>(tracker, MemoryCategory::kActivations, size_t(per_slot), memory);
    int64_t offset = 0;
    for (const LayerSaveSpec &spec : specs_) {
      LayerActivations<T> &d = deferred_[s].emplace_back();
      for (const SavedTensorSpec &t : spec.deferred) {
        d.tensors.push_back(deferred_own_[s].data() + offset);
        offset += Aligned(t.numel);
      }
    }
  }
}

template <typename T>
void ActivationStore<T>::SetBf16Views(LayerActivations<T> &act, size_t layer,
                                      uint16_t *stash) const {
  const LayerSaveSpec &spec = specs_[layer];
  act.bf16.assign(spec.tensors.size(), nullptr);
  act.only16.assign(spec.tensors.size(), 0);
  for (size_t i = 0; i < spec.tensors.size(); ++i) {  // AfterForward's order
    if (spec.tensors[i].exact || (options_.selective && spec.tensors[i].recomputable)) continue;
    act.only16[i] = std::is_same_v<T, float> && StashOnly(spec.tensors[i], options_);
    act.bf16[i] = stash;
    stash += spec.tensors[i].numel;
  }
}

template <typename T>
bool ActivationStore<T>::LeftToGemms(size_t layer, size_t i) const {
  return std::is_same_v<T, float> && ReadAsBf16Operand(specs_[layer].tensors[i], options_);
}

template <typename T>
bool ActivationStore<T>::AfterForward(int64_t slot, size_t layer, const Kernels<T> &k,
                                      bool backward_follows) {
  const LayerSaveSpec &spec = specs_[layer];
  if (options_.recompute) resident_[0] = {slot, spec.group};
  if (options_.selective) transient_resident_ = {slot, int64_t(layer)};
  if constexpr (std::is_same_v<T, float>) {
    if (!options_.half.has_value()) return false;
    const Half half = *options_.half;
    LayerActivations<T> &act = at(slot, layer);
    if (!backward_follows) {  // the output is what the next layer (or stage) reads
      if (spec.first_is_output && !spec.tensors[0].exact)
        k.RoundTo16(half, act[0], spec.tensors[0].numel);
      if (Keeps16()) resident_[layer % 2] = {};  // the region holds no stashed slot now
      return spec.first_is_output;
    }
    uint16_t *stash = Keeps16() ? stash_[size_t(slot)][layer].data() : nullptr;
    for (size_t i = 0; i < spec.tensors.size(); ++i) {
      if (spec.tensors[i].exact) continue;
      const int64_t n = spec.tensors[i].numel;
      const bool transient = options_.selective && spec.tensors[i].recomputable;
      if (stash && LeftToGemms(layer, i)) {  // its producer wrote it
        stash += n;
      } else if (stash && !transient) {
        // Into 16 bits, and the fp32 copy in the region rounded the same way,
        // so the backward sees what the 16-bit store gives back whether or
        // not the region is reused first.
        k.StashTo16(half, act[i], n, stash);
        stash += n;
      } else {
        k.RoundTo16(half, act[i], n);
      }
    }
    if (Keeps16()) resident_[layer % 2] = {slot, int64_t(layer)};
    return spec.first_is_output;
  } else {
    (void)slot, (void)k, (void)backward_follows;
    return false;
  }
}

template <typename T>
bool ActivationStore<T>::NeedsRecompute(int64_t slot, size_t layer) const {
  if (!options_.recompute || resident_[0].is(slot, specs_[layer].group)) return false;
  return group_needs_work_[layer];  // otherwise every layer of the group reads only what is kept
}

template <typename T>
bool ActivationStore<T>::NeedsRecomputeSaved(int64_t slot, size_t layer) const {
  if (!options_.selective || transient_resident_.is(slot, int64_t(layer))) return false;
  for (const SavedTensorSpec &t : specs_[layer].tensors)
    if (t.recomputable) return true;
  return false;
}

template <typename T>
void ActivationStore<T>::AfterRecomputeSaved(int64_t slot, size_t layer, const Kernels<T> &k) {
  transient_resident_ = {slot, int64_t(layer)};
  if constexpr (std::is_same_v<T, float>) {
    if (!options_.half.has_value()) return;
    const LayerSaveSpec &spec = specs_[layer];
    LayerActivations<T> &act = at(slot, layer);
    for (size_t i = 0; i < spec.tensors.size(); ++i)
      if (spec.tensors[i].recomputable && !spec.tensors[i].exact)
        k.RoundTo16(*options_.half, act[i], spec.tensors[i].numel);
  }
}

template <typename T>
void ActivationStore<T>::Restore(int64_t slot, size_t layer, const Kernels<T> &k) {
  if constexpr (std::is_same_v<T, float>) {
    if (!Keeps16() || resident_[layer % 2].is(slot, int64_t(layer))) return;
    const LayerSaveSpec &spec = specs_[layer];
    LayerActivations<T> &act = at(slot, layer);
    const uint16_t *stash = stash_[size_t(slot)][layer].data();
    for (size_t i = 0; i < spec.tensors.size(); ++i) {
      if (spec.tensors[i].exact || (options_.selective && spec.tensors[i].recomputable)) continue;
      if (!LeftToGemms(layer, i))
        k.UnstashFrom16(*options_.half, stash, spec.tensors[i].numel, act[i]);
      stash += spec.tensors[i].numel;
    }
    resident_[layer % 2] = {slot, int64_t(layer)};
  } else {
    (void)slot, (void)layer, (void)k;
  }
}

template class ActivationStore<float>;
template class ActivationStore<double>;

}  // namespace dst
