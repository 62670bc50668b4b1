#include "core/model/model.h"

#include <algorithm>
#include <string>
#include <type_traits>

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
                const ParamStoreOptions &store, const ActivationOptions &activations)
    : spec_(spec), limits_(limits) {
  ParamRegistry registry;
  BuildLayers(spec, registry, &layers_, &first_offset_, &layer_params_);

  store_ = std::make_unique<ParamStore<T>>(registry, tracker, store);
  store_->Initialize(spec.seed);

  int64_t max_width = spec.type == ModelSpec::Type::kSequential ? spec.input_dim : 0;
  int64_t max_scratch = 0;
  std::vector<LayerSaveSpec> saves;
  for (auto &layer : layers_) {
    layer->Bind(store_.get());
    saves.push_back({layer->SavedTensors(limits), layer->OutWidth() > 0});
    max_width = std::max(max_width, layer->OutWidth());
    max_scratch = std::max(max_scratch, layer->ScratchSize(limits));
  }
  activations_ = ActivationStore<T>(saves, activations, tracker);
  range_input_.assign(size_t(activations_.slots()), nullptr);
  const auto act = MemoryCategory::kActivations;
  grad_a_ = Buffer<T>(tracker, act, limits.max_rows() * max_width);
  grad_b_ = Buffer<T>(tracker, act, limits.max_rows() * max_width);
  scratch_ = Buffer<T>(tracker, act, max_scratch);
}

// The output buffer belongs to the activation store (const only to its readers).
template <typename T>
void Model<T>::RoundActivations(LayerHooks *hooks, const T *data, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (hooks == nullptr || n == 0) return;
    if (LayerHooks::RoundFn round = hooks->activation_rounding()) round(const_cast<T *>(data), n);
  }
}

template <typename T>
void Model<T>::Prepare(MicroBatch<T> &mb) {
  mb.scratch = scratch_.data();
  mb.max_threads = limits_.max_threads;
}

template <typename T>
const T *Model<T>::InputOf(size_t i, int64_t slot, LayerRange range,
                           const MicroBatch<T> &mb) const {
  if (i > range.begin) return activations_.at(slot, i - 1)[0];
  if (i == 0) return mb.inputs;  // null for a GPT: its embedding reads the tokens
  return range_input_[size_t(slot)];
}

template <typename T>
void Model<T>::ForwardLayer(size_t i, int64_t slot, const T *in, MicroBatch<T> &mb,
                            LayerHooks *hooks) {
  LayerActivations<T> &act = activations_.at(slot, i);
  layers_[i]->Forward(in, act, mb);
  const bool rounded = activations_.AfterForward(slot, i);
  if (!rounded && layers_[i]->OutWidth() > 0)
    RoundActivations(hooks, act[0], mb.rows() * layers_[i]->OutWidth());
}

template <typename T>
Status Model<T>::Forward(int64_t slot, LayerRange range, const T *input, MicroBatch<T> &mb,
                         LayerHooks *hooks, const T **output) {
  if (slot < 0 || slot >= activations_.slots() || range.end > layers_.size() ||
      range.begin >= range.end)
    return InternalError("Model::Forward: slot " + std::to_string(slot) + " of " +
                         std::to_string(activations_.slots()) + ", layers [" +
                         std::to_string(range.begin) + ", " + std::to_string(range.end) + ") of " +
                         std::to_string(layers_.size()));
  Prepare(mb);
  range_input_[size_t(slot)] = input;
  for (size_t i = range.begin; i < range.end; ++i) {
    if (hooks) DST_RETURN_IF_ERROR(hooks->BeforeForward(i));
    ForwardLayer(i, slot, InputOf(i, slot, range, mb), mb, hooks);
  }
  if (output)
    *output =
        layers_[range.end - 1]->OutWidth() > 0 ? activations_.at(slot, range.end - 1)[0] : nullptr;
  return Status::Ok();
}

template <typename T>
Status Model<T>::Backward(int64_t slot, LayerRange range, T *dout, T *din, MicroBatch<T> &mb,
                          LayerHooks *hooks) {
  if (slot < 0 || slot >= activations_.slots() || range.end > layers_.size() ||
      range.begin >= range.end)
    return InternalError("Model::Backward: slot " + std::to_string(slot) + " of " +
                         std::to_string(activations_.slots()) + ", layers [" +
                         std::to_string(range.begin) + ", " + std::to_string(range.end) + ") of " +
                         std::to_string(layers_.size()));
  Prepare(mb);
  T *buffers[2] = {grad_a_.data(), grad_b_.data()};
  int next = 0;
  for (size_t i = range.end; i-- > range.begin;) {
    T *layer_din = i > range.begin ? buffers[next] : din;
    activations_.Restore(slot, i);
    if (i > range.begin) activations_.Restore(slot, i - 1);  // its output is this layer's input
    if (hooks) DST_RETURN_IF_ERROR(hooks->BeforeBackward(i));
    const T *in = InputOf(i, slot, range, mb);
    if (activations_.NeedsRecompute(slot, i)) ForwardLayer(i, slot, in, mb, hooks);
    layers_[i]->Backward(in, activations_.at(slot, i), dout, layer_din, mb);
    if (hooks) DST_RETURN_IF_ERROR(hooks->AfterBackward(i));
    if (layer_din && i > 0)
      RoundActivations(hooks, layer_din, mb.rows() * layers_[i - 1]->OutWidth());
    dout = layer_din;
    next ^= 1;
  }
  return Status::Ok();
}

template <typename T>
Result<double> Model<T>::Forward(MicroBatch<T> &mb, LayerHooks *hooks) {
  DST_RETURN_IF_ERROR(Forward(0, all_layers(), nullptr, mb, hooks));
  return Loss(0);
}

template <typename T>
Status Model<T>::Backward(MicroBatch<T> &mb, LayerHooks *hooks) {
  return Backward(0, all_layers(), nullptr, nullptr, mb, hooks);
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
