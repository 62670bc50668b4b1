#include "core/model/model.h"

#include <type_traits>

#include <algorithm>
#include <string>

#include "core/model/gpt_layers.h"
#include "core/model/sequential_layers.h"

namespace dst {

namespace {

// Layers declare their parameters in order, so a layer's parameters start at
// the registry's total before it was built. (The GPT head also writes the tied
// wte, which lives in the first layer: its boundary is still the embedding's.)
template <typename T>
using LayerList = std::vector<std::unique_ptr<Layer<T>>>;

// Returns the id of the tied wte, which the head (last layer) also uses.
template <typename T>
int BuildGpt(const ModelSpec &spec_, ParamRegistry &registry, LayerList<T> &layers_,
             std::vector<int64_t> &first_offset_) {
  first_offset_.push_back(registry.total_numel());
  auto embedding = std::make_unique<GptEmbedding<T>>(spec_.gpt, registry);
  const int wte = embedding->wte_id();
  layers_.push_back(std::move(embedding));
  for (int i = 0; i < spec_.gpt.n_layer; ++i) {
    first_offset_.push_back(registry.total_numel());
    layers_.push_back(std::make_unique<GptBlock<T>>(spec_.gpt, i, registry));
  }
  first_offset_.push_back(registry.total_numel());
  layers_.push_back(std::make_unique<GptHead<T>>(spec_.gpt, wte, registry));
  return wte;
}

template <typename T>
void BuildSequential(const ModelSpec &spec_, ParamRegistry &registry, LayerList<T> &layers_,
                     std::vector<int64_t> &first_offset_) {
  int64_t width = spec_.input_dim;
  for (size_t i = 0; i < spec_.layers.size(); ++i) {
    first_offset_.push_back(registry.total_numel());
    const SequentialLayerSpec &l = spec_.layers[i];
    const std::string prefix = "layers." + std::to_string(i);
    switch (l.kind) {
      case SequentialLayerSpec::Kind::kLinear:
        layers_.push_back(
            std::make_unique<LinearLayer<T>>(prefix, width, l.out_features, l.bias, registry));
        width = l.out_features;
        break;
      case SequentialLayerSpec::Kind::kRelu:
        layers_.push_back(
            std::make_unique<ActivationLayer<T>>(ActivationLayer<T>::Fn::kRelu, width));
        break;
      case SequentialLayerSpec::Kind::kGelu:
        layers_.push_back(
            std::make_unique<ActivationLayer<T>>(ActivationLayer<T>::Fn::kGelu, width));
        break;
      case SequentialLayerSpec::Kind::kLayerNorm:
        layers_.push_back(std::make_unique<LayerNormLayer<T>>(prefix, width, registry));
        break;
    }
  }
  first_offset_.push_back(registry.total_numel());
  if (spec_.loss == ModelSpec::Loss::kMse)
    layers_.push_back(std::make_unique<MseLossLayer<T>>(width));
  else
    layers_.push_back(std::make_unique<CrossEntropyLossLayer<T>>(width));
}

// Per layer: the tensors declared while it was built (their offsets lie in
// [first_offsets[i], first_offsets[i + 1])), plus the tied tensor of the last
// layer, if any.
std::vector<LayerParamUse> LayerUses(const ParamRegistry &registry,
                                     const std::vector<int64_t> &first_offsets, int tied_to_last) {
  std::vector<LayerParamUse> uses(first_offsets.size());
  for (size_t i = 0; i < uses.size(); ++i) {
    uses[i].begin = first_offsets[i];
    uses[i].end = i + 1 < uses.size() ? first_offsets[i + 1] : registry.total_numel();
    for (size_t k = 0; k < registry.decls().size(); ++k) {
      const int64_t offset = registry.decls()[k].offset;
      if (offset >= uses[i].begin && offset < uses[i].end) uses[i].ids.push_back(int(k));
    }
  }
  if (tied_to_last >= 0 && !uses.empty()) uses.back().ids.push_back(tied_to_last);
  return uses;
}

// Builds the layers of `spec`; each declares its parameters into `registry`
// (nothing is allocated until Reserve and the ParamStore).
template <typename T>
void BuildLayers(const ModelSpec &spec, ParamRegistry &registry, LayerList<T> *layers,
                 std::vector<int64_t> *first_offsets, std::vector<LayerParamUse> *uses) {
  int tied = -1;
  if (spec.type == ModelSpec::Type::kGpt)
    tied = BuildGpt<T>(spec, registry, *layers, *first_offsets);
  else
    BuildSequential<T>(spec, registry, *layers, *first_offsets);
  *uses = LayerUses(registry, *first_offsets, tied);
}

ParamRegistry Declare(const ModelSpec &spec) {
  ParamRegistry registry;
  LayerList<float> layers;
  std::vector<int64_t> offsets;
  std::vector<LayerParamUse> uses;
  BuildLayers<float>(spec, registry, &layers, &offsets, &uses);
  return registry;
}

}  // namespace

int64_t CountParameters(const ModelSpec &spec) {
  return Declare(spec).total_numel();
}

std::vector<ParamDecl> DeclareParameters(const ModelSpec &spec) {
  return Declare(spec).decls();
}

template <typename T>
Model<T>::Model(const ModelSpec &spec, const ActivationLimits &limits, MemoryTracker *tracker,
                const ParamStoreOptions &store)
    : spec_(spec), limits_(limits) {
  ParamRegistry registry;
  BuildLayers(spec, registry, &layers_, &first_offset_, &layer_params_);

  store_ = std::make_unique<ParamStore<T>>(registry, tracker, store);
  store_->Initialize(spec.seed);

  int64_t max_width = spec.type == ModelSpec::Type::kSequential ? spec.input_dim : 0;
  int64_t max_scratch = 0;
  for (auto &layer : layers_) {
    layer->Bind(store_.get());
    layer->Reserve(limits, tracker);
    max_width = std::max(max_width, layer->OutWidth());
    max_scratch = std::max(max_scratch, layer->ScratchSize(limits));
  }
  const auto act = MemoryCategory::kActivations;
  grad_a_ = Buffer<T>(tracker, act, limits.max_rows() * max_width);
  grad_b_ = Buffer<T>(tracker, act, limits.max_rows() * max_width);
  scratch_ = Buffer<T>(tracker, act, max_scratch);
}

// The output buffer belongs to the layer (const only to its readers).
template <typename T>
void Model<T>::RoundActivations(LayerHooks *hooks, const T *data, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (hooks == nullptr || n == 0) return;
    if (LayerHooks::RoundFn round = hooks->activation_rounding()) round(const_cast<T *>(data), n);
  }
}

template <typename T>
double Model<T>::Forward(MicroBatch<T> &mb, LayerHooks *hooks) {
  mb.scratch = scratch_.data();
  mb.max_threads = limits_.max_threads;
  const T *x = mb.inputs;  // null for a GPT: its embedding reads the tokens
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (hooks) hooks->BeforeForward(i);
    x = layers_[i]->Forward(x, mb);
    // Stash rounds every saved buffer, the output among them; round an
    // output only if it is not one of those.
    if (stash_activations_) Stash(i);
    if (!stash_activations_ || !InRegion(i, x))
      RoundActivations(hooks, x, mb.rows() * layers_[i]->OutWidth());
  }
  return layers_.back()->Loss();
}

template <typename T>
void Model<T>::Backward(MicroBatch<T> &mb, LayerHooks *hooks) {
  mb.scratch = scratch_.data();
  mb.max_threads = limits_.max_threads;
  T *dout = nullptr;
  T *buffers[2] = {grad_a_.data(), grad_b_.data()};
  int next = 0;
  for (size_t i = layers_.size(); i-- > 0;) {
    T *din = i > 0 ? buffers[next] : nullptr;
    if (stash_activations_) {
      Restore(i);
      if (i > 0) Restore(i - 1);  // its output is this layer's input
    }
    if (hooks) hooks->BeforeBackward(i);
    layers_[i]->Backward(dout, din, mb);
    if (hooks) hooks->AfterBackward(i);
    if (din) RoundActivations(hooks, din, mb.rows() * layers_[i - 1]->OutWidth());
    dout = din;
    next ^= 1;
  }
}

template <typename T>
void Model<T>::StoreActivationsIn16Bits(Half half, MemoryTracker *tracker) {
  if constexpr (std::is_same_v<T, float>) {
    constexpr size_t kAlign = 16;  // elements: keeps every view 64-byte aligned
    half_ = half;
    saved_.resize(layers_.size());
    std::vector<size_t> totals(layers_.size(), 0);
    size_t need[2] = {0, 0};
    for (size_t i = 0; i < layers_.size(); ++i) {
      saved_[i] = layers_[i]->SavedBuffers();
      size_t aligned = 0;
      for (Buffer<T> *b : saved_[i]) {
        totals[i] += b->size();
        aligned += (b->size() + kAlign - 1) / kAlign * kAlign;
      }
      need[i % 2] = std::max(need[i % 2], aligned);
    }
    for (int p = 0; p < 2; ++p)
      regions_[p] = Buffer<T>(tracker, MemoryCategory::kActivations, need[p]);
    stashes_.clear();
    for (size_t i = 0; i < layers_.size(); ++i) {
      size_t offset = 0;
      for (Buffer<T> *b : saved_[i]) {
        const size_t n = b->size();
        *b = Buffer<T>::View(regions_[i % 2].data() + offset, n);  // frees the layer's own
        offset += (n + kAlign - 1) / kAlign * kAlign;
      }
      stashes_.emplace_back(tracker, MemoryCategory::kActivations, totals[i]);
    }
    stash_activations_ = true;
  } else {
    (void)half;
    (void)tracker;
  }
}

// After layer i's forward: its values into 16 bits, and the fp32 copy still
// in the region rounded the same way, so its backward sees exactly what a
// 16-bit store would give back whether or not the region is reused first.
template <typename T>
void Model<T>::Stash(size_t layer) {
  if constexpr (std::is_same_v<T, float>) {
    uint16_t *stash = stashes_[layer].data();
    for (Buffer<T> *b : saved_[layer]) {
      const int64_t n = int64_t(b->size());
      FromFloat(half_, b->data(), stash, n);
      ToFloat(half_, stash, b->data(), n);
      stash += n;
    }
    resident_[layer % 2] = int64_t(layer);
  }
}

template <typename T>
bool Model<T>::InRegion(size_t layer, const T *p) const {
  const Buffer<T> &region = regions_[layer % 2];
  return p >= region.data() && p < region.data() + region.size();
}

template <typename T>
void Model<T>::Restore(size_t layer) {
  if constexpr (std::is_same_v<T, float>) {
    if (resident_[layer % 2] == int64_t(layer)) return;
    const uint16_t *stash = stashes_[layer].data();
    for (Buffer<T> *b : saved_[layer]) {
      ToFloat(half_, stash, b->data(), int64_t(b->size()));
      stash += b->size();
    }
    resident_[layer % 2] = int64_t(layer);
  }
}

template <typename T>
double Model<T>::ForwardFlops(int64_t B, int64_t seq) const {
  double flops = 0;
  for (const auto &layer : layers_) flops += layer->ForwardFlops(B, seq);
  return flops;
}

template class Model<float>;
template class Model<double>;

}  // namespace dst
