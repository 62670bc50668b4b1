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

// Where a tensor lives under each policy.
enum class Home { kOwn, kShared };

template <typename T>
Home HomeOf(const LayerSaveSpec &spec, size_t k, const ActivationOptions &options) {
  if (options.recompute) return IsOutput(spec, k) ? Home::kOwn : Home::kShared;
  if (options.half.has_value() && std::is_same_v<T, float>)
    return spec.tensors[k].exact ? Home::kOwn : Home::kShared;
  return Home::kOwn;
}

}  // namespace

template <typename T>
ActivationStore<T>::ActivationStore(const std::vector<LayerSaveSpec> &layers,
                                    const ActivationOptions &options, MemoryTracker *tracker)
    : options_(options), specs_(layers) {
  if constexpr (!std::is_same_v<T, float>) options_.half.reset();  // 16 bits: fp32 models only
  const auto cat = MemoryCategory::kActivations;
  const size_t L = layers.size();
  const size_t slots = size_t(std::max<int64_t>(1, options_.slots));

  // Sizes: per slot (own) and per shared region.
  int64_t own = 0, shared[2] = {0, 0};
  std::vector<int64_t> stash_numel(L, 0);
  for (size_t l = 0; l < L; ++l) {
    int64_t layer_shared = 0;
    for (size_t k = 0; k < layers[l].tensors.size(); ++k) {
      const int64_t n = layers[l].tensors[k].numel;
      if (HomeOf<T>(layers[l], k, options_) == Home::kOwn) {
        own += Aligned(n);
      } else {
        layer_shared += Aligned(n);
        stash_numel[l] += n;
      }
    }
    const int region = options_.recompute ? 0 : int(l % 2);
    shared[region] = std::max(shared[region], layer_shared);
  }
  for (int r = 0; r < 2; ++r)
    if (shared[r] > 0) shared_[r] = Buffer<T>(tracker, cat, size_t(shared[r]));

  acts_.resize(slots);
  own_.resize(slots);
  if (Keeps16()) stash_.resize(slots);
  for (size_t s = 0; s < slots; ++s) {
    own_[s] = Buffer<T>(tracker, cat, size_t(own));
    int64_t own_offset = 0;
    acts_[s].resize(L);
    for (size_t l = 0; l < L; ++l) {
      const int region = options_.recompute ? 0 : int(l % 2);
      int64_t shared_offset = 0;
      LayerActivations<T> &act = acts_[s][l];
      act.tensors.resize(layers[l].tensors.size());
      for (size_t k = 0; k < layers[l].tensors.size(); ++k) {
        const int64_t n = layers[l].tensors[k].numel;
        if (HomeOf<T>(layers[l], k, options_) == Home::kOwn) {
          act.tensors[k] = own_[s].data() + own_offset;
          own_offset += Aligned(n);
        } else {
          act.tensors[k] = shared_[region].data() + shared_offset;
          shared_offset += Aligned(n);
        }
      }
      if (Keeps16()) stash_[s].emplace_back(tracker, cat, size_t(stash_numel[l]));
    }
  }
  if (options_.split_backward) AllocateDeferred(slots, tracker);
}

template <typename T>
void ActivationStore<T>::AllocateDeferred(size_t slots, MemoryTracker *tracker) {
  int64_t per_slot = 0;
  for (const LayerSaveSpec &spec : specs_)
    for (const SavedTensorSpec &t : spec.deferred) per_slot += Aligned(t.numel);
  deferred_.resize(slots);
  deferred_own_.resize(slots);
  for (size_t s = 0; s < slots; ++s) {
    deferred_own_[s] = Buffer<T>(tracker, MemoryCategory::kActivations, size_t(per_slot));
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
bool ActivationStore<T>::AfterForward(int64_t slot, size_t layer) {
  const LayerSaveSpec &spec = specs_[layer];
  if (options_.recompute) resident_[0] = {slot, int64_t(layer)};
  if constexpr (std::is_same_v<T, float>) {
    if (!options_.half.has_value()) return false;
    const Half half = *options_.half;
    LayerActivations<T> &act = at(slot, layer);
    uint16_t *stash = Keeps16() ? stash_[size_t(slot)][layer].data() : nullptr;
    for (size_t k = 0; k < spec.tensors.size(); ++k) {
      if (spec.tensors[k].exact) continue;
      const int64_t n = spec.tensors[k].numel;
      if (stash) {
        // Into 16 bits, and the fp32 copy in the region rounded the same way,
        // so the backward sees what the 16-bit store gives back whether or
        // not the region is reused first.
        FromFloat(half, act[k], stash, n);
        ToFloat(half, stash, act[k], n);
        stash += n;
      } else {
        RoundInPlace(half, act[k], n);
      }
    }
    if (Keeps16()) resident_[layer % 2] = {slot, int64_t(layer)};
    return spec.first_is_output;
  } else {
    (void)slot;
    return false;
  }
}

template <typename T>
bool ActivationStore<T>::NeedsRecompute(int64_t slot, size_t layer) const {
  if (!options_.recompute || resident_[0].is(slot, layer)) return false;
  const LayerSaveSpec &spec = specs_[layer];
  for (size_t k = 0; k < spec.tensors.size(); ++k)
    if (!IsOutput(spec, k)) return true;
  return false;  // its backward reads only its input and output, both kept
}

template <typename T>
void ActivationStore<T>::Restore(int64_t slot, size_t layer) {
  if constexpr (std::is_same_v<T, float>) {
    if (!Keeps16() || resident_[layer % 2].is(slot, layer)) return;
    const LayerSaveSpec &spec = specs_[layer];
    LayerActivations<T> &act = at(slot, layer);
    const uint16_t *stash = stash_[size_t(slot)][layer].data();
    for (size_t k = 0; k < spec.tensors.size(); ++k) {
      if (spec.tensors[k].exact) continue;
      ToFloat(*options_.half, stash, act[k], spec.tensors[k].numel);
      stash += spec.tensors[k].numel;
    }
    resident_[layer % 2] = {slot, int64_t(layer)};
  } else {
    (void)slot;
    (void)layer;
  }
}

template class ActivationStore<float>;
template class ActivationStore<double>;

}  // namespace dst
