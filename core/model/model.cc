#include "core/model/model.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "core/layers/tp_linear.h"
#include "core/model/family.h"
#include "core/model/sequential_layers.h"

namespace dst {

namespace {

// Layers declare their parameters in order, so a layer's parameters start at
// the registry's total before it was built. (The GPT head also writes the tied
// wte, which lives in the first layer: its boundary is still the embedding's.)
template <typename T>
using LayerList = std::vector<std::unique_ptr<Layer<T>>>;

// Layers of the whole model: a language model = embedding, n_layer
// decoder layers, head; sequential = its layers, then the loss.
size_t GlobalLayerCount(const ModelSpec &spec) {
  if (spec.IsLanguageModel()) return size_t(spec.lm.n_layer) + 2;
  return spec.layers.size() + 1;
}

// The tensor-parallel role of each layer of the whole model (all replicated
// at tp 1; the engine has checked the plan before building).
std::vector<TpRole> RolesOf(const ModelSpec &spec, const TensorParallelGroup &tp) {
  Result<std::vector<TpRole>> roles = PlanTensorParallel(spec, tp.size);
  if (roles.ok()) return roles.value();
  return std::vector<TpRole>(GlobalLayerCount(spec), TpRole::kReplicated);
}

// The input width of each layer of the whole model as one tensor-parallel
// rank sees it (0: the GPT embedding): a column-parallel Linear's output and
// the element-wise layers after it are this rank's slice.
std::vector<int64_t> InWidths(const ModelSpec &spec, const std::vector<TpRole> &roles, int64_t tp) {
  std::vector<int64_t> widths;
  if (spec.IsLanguageModel()) {
    widths.assign(GlobalLayerCount(spec), spec.lm.d_model);
    widths[0] = 0;
    return widths;
  }
  int64_t width = spec.input_dim;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    widths.push_back(width);
    if (spec.layers[i].kind == SequentialLayerSpec::Kind::kLinear)
      width = roles[i] == TpRole::kColumn ? spec.layers[i].out_features / tp
                                          : spec.layers[i].out_features;
  }
  widths.push_back(width);  // the loss
  return widths;
}

// Builds layer g of the whole model, declaring its tensors into `registry`.
// *wte: the token embedding's wte id once built here (a tied head uses it,
// or declares its own copy when the embedding lives on another stage).
template <typename T>
std::unique_ptr<Layer<T>> MakeLayer(const ModelSpec &spec, const DecoderFamily *family, size_t g,
                                    int64_t in_width, TpRole role, const TensorParallelGroup &tp,
                                    ParamRegistry &registry, int *wte) {
  if (spec.IsLanguageModel()) {
    const DecoderFamily &f = *family;
    if (g == 0) {
      auto embedding = std::make_unique<TokenEmbedding<T>>(
          f.embedding, f.embedding_names, registry,
          role == TpRole::kVocab ? tp : TensorParallelGroup{});
      *wte = embedding->wte_id();
      return embedding;
    }
    if (g <= size_t(spec.lm.n_layer))
      return std::make_unique<DecoderLayer<T>>(
          f.block, f.block_names(int64_t(g) - 1), registry,
          role == TpRole::kHeads ? tp : TensorParallelGroup{});
    return std::make_unique<LmHead<T>>(f.head, f.head_names, f.tied, *wte, registry,
                                       role == TpRole::kVocab ? tp : TensorParallelGroup{});
  }
  // Sequence parallelism: the layers outside the tensor-parallel regions
  // hold this rank's rows.
  const TensorParallelGroup rows =
      role == TpRole::kReplicated && tp.splits_rows() ? tp : TensorParallelGroup{};
  if (g == spec.layers.size()) {
    if (spec.loss == ModelSpec::Loss::kMse)
      return std::make_unique<MseLossLayer<T>>(in_width, rows);
    return std::make_unique<CrossEntropyLossLayer<T>>(in_width, rows);
  }
  const SequentialLayerSpec &l = spec.layers[g];
  const std::string prefix = "layers." + std::to_string(g);
  switch (l.kind) {
    case SequentialLayerSpec::Kind::kLinear:
      if (role != TpRole::kReplicated) {  // a row-parallel layer's input is a slice
        const int64_t in = role == TpRole::kRow ? in_width * tp.size : in_width;
        return std::make_unique<TensorParallelLinear<T>>(prefix, in, l.out_features, l.bias, role,
                                                         tp, registry);
      }
      return std::make_unique<LinearLayer<T>>(prefix, in_width, l.out_features, l.bias, registry);
    case SequentialLayerSpec::Kind::kRelu:
      return std::make_unique<ActivationLayer<T>>(ActivationLayer<T>::Fn::kRelu, in_width, rows);
    case SequentialLayerSpec::Kind::kGelu:
      return std::make_unique<ActivationLayer<T>>(ActivationLayer<T>::Fn::kGelu, in_width, rows);
    case SequentialLayerSpec::Kind::kLayerNorm:
      break;
  }
  return std::make_unique<LayerNormLayer<T>>(prefix, in_width, registry, rows);
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

// The whole model as one chunk.
std::vector<LayerRange> WholeModel(const ModelSpec &spec) {
  return {LayerRange{0, GlobalLayerCount(spec)}};
}

// What one rank builds: the layers of `chunks` (global indices) in order,
// each declaring its parameters into `registry` (nothing is allocated until
// the ParamStore).
template <typename T>
struct BuiltLayers {
  LayerList<T> layers;
  std::vector<size_t> global;          // per local layer
  std::vector<int64_t> first_offsets;  // per local layer
  std::vector<LayerParamUse> uses;
  std::vector<LayerRange> chunks;  // local ranges
  std::vector<int64_t> widths;     // per global layer: its input width on this tp rank
  // Per global layer, under sequence parallelism: whether its output holds
  // every token row (inside a tensor-parallel region: a column-parallel
  // Linear and the element-wise layers on its slice) rather than this rank's.
  std::vector<bool> all_rows;
};

// `pad_vocab`: the embedding and head hold the padded vocabulary (a rank's
// storage); false: the global tensors (the whole model as checkpoints and
// get_param speak it).
template <typename T>
BuiltLayers<T> BuildLayers(const ModelSpec &spec, const std::vector<LayerRange> &chunks,
                           ParamRegistry &registry, const TensorParallelGroup &tp = {},
                           bool pad_vocab = true) {
  BuiltLayers<T> built;
  const std::vector<TpRole> roles = RolesOf(spec, tp);
  built.widths = InWidths(spec, roles, tp.size);
  for (const TpRole role : roles)
    built.all_rows.push_back(tp.splits_rows() &&
                             (role == TpRole::kColumn || role == TpRole::kLocalSlice));
  int wte = -1;
  DecoderFamily family = spec.IsLanguageModel() ? FamilyOf(spec) : DecoderFamily{};
  if (spec.IsLanguageModel() && pad_vocab)
    family.embedding.padded_vocab = family.head.padded_vocab = spec.lm.PaddedVocab(tp.size);
  for (const LayerRange &chunk : chunks) {
    const size_t local_begin = built.layers.size();
    for (size_t g = chunk.begin; g < chunk.end; ++g) {
      built.first_offsets.push_back(registry.total_numel());
      built.layers.push_back(
          MakeLayer<T>(spec, &family, g, built.widths[g], roles[g], tp, registry, &wte));
      built.global.push_back(g);
    }
    built.chunks.push_back({local_begin, built.layers.size()});
  }
  // A tied head uses the embedding's wte when both are here (one model).
  const bool tied = spec.IsLanguageModel() && family.tied && !built.global.empty() &&
                    built.global.front() == 0 && built.global.back() + 1 == GlobalLayerCount(spec);
  built.uses = LayerUses(registry, built.first_offsets, tied ? wte : -1);
  return built;
}

// What a model's layers need of activation memory: each layer's saves
// (numbered into recomputation groups: runs of `recompute_interval` layers
// from each chunk's first layer, as DeepSpeed counts the interval over a
// stage's layers) and the sizes of the model's work buffers.
struct ActivationNeeds {
  std::vector<LayerSaveSpec> saves;
  std::vector<size_t> group_begin, group_end;  // per layer: its group's [first, last + 1)
  int64_t max_width = 0, max_scratch = 0;
};

// A layer made only of parts kept in fp32 (fp16_override_modules): its
// output and input gradient are not rounded to 16 bits either.
template <typename T>
bool KeptFp32(const Layer<T> &layer, ModuleSet fp32) {
  return !layer.Modules().empty() && fp32.covers(layer.Modules());
}

template <typename T>
ActivationNeeds NeedsOf(const ModelSpec &spec, const LayerList<T> &layers,
                        const std::vector<LayerRange> &chunks, const ActivationLimits &limits,
                        const ActivationOptions &activations) {
  ActivationNeeds n;
  n.max_width = spec.IsLanguageModel() ? 0 : spec.input_dim;
  const ModuleSet fp32 = activations.half ? activations.fp32_modules : ModuleSet{};
  for (const auto &layer : layers) {
    n.saves.push_back({layer->SavedTensors(limits), layer->OutWidth() > 0,
                       activations.split_backward ? layer->DeferredTensors(limits)
                                                  : std::vector<SavedTensorSpec>{}});
    const bool whole = KeptFp32(*layer, fp32);
    for (SavedTensorSpec &t : n.saves.back().tensors) {
      if (t.module == ModuleType::kWhole ? whole : fp32.has(t.module)) t.exact = true;
      if (t.operand_of && fp32.has(*t.operand_of)) t.operand_of.reset();  // fp32 GEMMs read it
    }
    n.max_width = std::max(n.max_width, layer->OutWidth());
    n.max_scratch = std::max(n.max_scratch, layer->ScratchSize(limits));
  }
  const size_t interval = size_t(std::max<int64_t>(1, activations.recompute_interval));
  n.group_begin.assign(layers.size(), 0);
  n.group_end.assign(layers.size(), 0);
  int64_t group = -1;
  for (const LayerRange &c : chunks)
    for (size_t i = c.begin; i < c.end; i += interval) {
      ++group;
      for (size_t j = i; j < std::min(c.end, i + interval); ++j) {
        n.saves[j].group = group;
        n.group_begin[j] = i;
        n.group_end[j] = std::min(c.end, i + interval);
      }
    }
  return n;
}

// The model's work buffers: two gradient ping-pong buffers and the scratch.
int64_t WorkElements(const ActivationNeeds &n, const ActivationLimits &limits) {
  return 2 * limits.max_rows() * n.max_width + n.max_scratch;
}

// The whole model's global tensors (no padding rows).
ParamRegistry Declare(const ModelSpec &spec) {
  ParamRegistry registry;
  BuildLayers<float>(spec, WholeModel(spec), registry, {}, /*pad_vocab=*/false);
  return registry;
}

}  // namespace

int64_t CountParameters(const ModelSpec &spec) {
  return Declare(spec).total_numel();
}

std::vector<ParamDecl> DeclareParameters(const ModelSpec &spec) {
  return Declare(spec).decls();
}

std::vector<ParamDecl> DeclarePartParameters(const ModelSpec &spec,
                                             const std::vector<LayerRange> &chunks, int64_t tp) {
  std::vector<LayerParamUse> uses;
  return DeclarePartParameters(spec, chunks, tp, &uses);
}

std::vector<ParamDecl> DeclarePartParameters(const ModelSpec &spec,
                                             const std::vector<LayerRange> &chunks, int64_t tp,
                                             std::vector<LayerParamUse> *uses) {
  ParamRegistry registry;
  *uses = BuildLayers<float>(spec, chunks.empty() ? WholeModel(spec) : chunks, registry,
                             TensorParallelGroup{nullptr, tp, 0, false})
              .uses;
  return registry.decls();
}

int64_t SavedActivationElements(const ModelSpec &spec, const std::vector<LayerRange> &chunks,
                                const ActivationLimits &limits, bool deferred, int64_t tp,
                                bool sequence_parallel) {
  ParamRegistry registry;
  BuiltLayers<float> built =
      BuildLayers<float>(spec, chunks.empty() ? WholeModel(spec) : chunks, registry,
                         TensorParallelGroup{nullptr, tp, 0, sequence_parallel});
  int64_t total = 0;
  for (const auto &layer : built.layers) {
    for (const SavedTensorSpec &t : layer->SavedTensors(limits)) total += t.numel;
    if (deferred)
      for (const SavedTensorSpec &t : layer->DeferredTensors(limits)) total += t.numel;
  }
  return total;
}

int64_t ActivationBytes(const ModelSpec &spec, const std::vector<LayerRange> &chunks,
                        const ActivationLimits &limits, const ActivationOptions &activations,
                        int64_t tp, bool sequence_parallel) {
  ParamRegistry registry;
  BuiltLayers<float> built =
      BuildLayers<float>(spec, chunks.empty() ? WholeModel(spec) : chunks, registry,
                         TensorParallelGroup{nullptr, tp, 0, sequence_parallel});
  const ActivationNeeds n = NeedsOf(spec, built.layers, built.chunks, limits, activations);
  return ActivationStore<float>::Bytes(n.saves, activations) +
         int64_t(sizeof(float)) * WorkElements(n, limits);
}

std::vector<LayerSummary> SummarizeLayers(const ModelSpec &spec, int64_t B, int64_t seq) {
  ParamRegistry registry;
  BuiltLayers<float> built = BuildLayers<float>(spec, WholeModel(spec), registry);
  std::vector<LayerSummary> out;
  for (size_t i = 0; i < built.layers.size(); ++i) {
    LayerSummary s;
    s.kind = std::string(built.layers[i]->Kind());
    const int64_t end =
        i + 1 < built.layers.size() ? built.first_offsets[i + 1] : registry.total_numel();
    s.parameters = end - built.first_offsets[i];
    s.forward_flops = built.layers[i]->ForwardFlops(B, seq);
    out.push_back(std::move(s));
  }
  return out;
}

template <typename T>
Model<T>::Model(const ModelSpec &spec, const ActivationLimits &limits, MemoryTracker *tracker,
                const ParamStoreOptions &store, const ActivationOptions &activations,
                const ModelPart &part, MemoryResource *memory)
    : spec_(spec),
      limits_(limits),
      row_split_(part.tp.splits_rows() ? part.tp.size : 1),
      row_rank_(part.tp.splits_rows() ? part.tp.rank : 0) {
  ParamRegistry registry;
  BuiltLayers<T> built =
      BuildLayers<T>(spec, part.chunks.empty() ? WholeModel(spec) : part.chunks, registry, part.tp);
  layers_ = std::move(built.layers);
  global_layers_ = std::move(built.global);
  first_offset_ = std::move(built.first_offsets);
  layer_params_ = std::move(built.uses);
  chunks_ = std::move(built.chunks);
  for (size_t g : global_layers_) in_widths_.push_back(built.widths[g]);
  all_rows_ = std::move(built.all_rows);
  if (!part.chunks.empty()) {  // a stage's tensors start as the whole model's do
    const ParamRegistry whole = Declare(spec);
    for (size_t k = 0; k < registry.decls().size(); ++k)
      for (size_t g = 0; g < whole.decls().size(); ++g)
        if (whole.decls()[g].name == registry.decls()[k].name)
          registry.SetInitKey(int(k), int64_t(g));
  }

  store_ = std::make_unique<ParamStore<T>>(registry, tracker, store, memory);
  store_->Initialize(spec.seed);

  for (auto &layer : layers_) layer->Bind(store_.get());
  ActivationNeeds needs = NeedsOf(spec, layers_, chunks_, limits, activations);
  const ModuleSet fp32 = activations.half ? activations.fp32_modules : ModuleSet{};
  for (auto &layer : layers_) fp32_layers_.push_back(KeptFp32(*layer, fp32));
  group_begin_ = std::move(needs.group_begin);
  group_end_ = std::move(needs.group_end);
  activations_ = ActivationStore<T>(needs.saves, activations, tracker, memory);
  range_input_.assign(size_t(activations_.slots()), nullptr);
  const auto act = MemoryCategory::kActivations;  // the work buffers (WorkElements)
  grad_a_ = Buffer<T>(tracker, act, limits.max_rows() * needs.max_width, memory);
  grad_b_ = Buffer<T>(tracker, act, limits.max_rows() * needs.max_width, memory);
  scratch_ = Buffer<T>(tracker, act, needs.max_scratch, memory);
  // One double next to the kernels (not charged: below any block the
  // estimate counts).
  if (defers_loss()) loss_sum_ = Buffer<double>(nullptr, act, 1, memory);
}

template <typename T>
void Model<T>::ZeroLossSum() {
  if (!loss_sum_.data()) return;
  static_assert(sizeof(double) % sizeof(T) == 0);
  kernels_->Zero(int64_t(sizeof(double) / sizeof(T)), reinterpret_cast<T *>(loss_sum_.data()));
}

template <typename T>
Result<double> Model<T>::ReadLossSum() {
  if (!loss_sum_.data()) return 0.0;
  double sum = 0;
  if (MemoryResource *memory = loss_sum_.resource())
    memory->Download(&sum, loss_sum_.data(), sizeof sum);  // the step's one wait for its losses
  else
    sum = loss_sum_[0];
  DST_RETURN_IF_ERROR(kernels_->TakeError());
  return sum;
}

// The output buffer belongs to the activation store (const only to its readers).
template <typename T>
void Model<T>::RoundActivations(LayerHooks *hooks, const T *data, int64_t n) const {
  if constexpr (std::is_same_v<T, float>) {
    if (hooks == nullptr || n == 0) return;
    if (const std::optional<Half> half = hooks->activation_half())
      kernels_->RoundTo16(*half, const_cast<T *>(data), n);
  }
}

template <typename T>
std::vector<int64_t> Model<T>::KvCacheWidths() const {
  std::vector<int64_t> widths;
  for (const auto &layer : layers_) widths.push_back(layer->KvCacheWidth());
  return widths;
}

template <typename T>
void Model<T>::Prepare(MicroBatch<T> &mb) {
  mb.scratch = scratch_.data();
  mb.max_threads = limits_.max_threads;
  mb.compute = compute_;
  mb.kernels = kernels_;
  mb.fp32_modules = activations_.options().half ? activations_.options().fp32_modules : ModuleSet{};
  if (kv_cache_) mb.position = kv_cache_->length();
}

template <typename T>
const T *Model<T>::InputOf(size_t i, int64_t slot, LayerRange range,
                           const MicroBatch<T> &mb) const {
  if (i > range.begin) return activations_.at(slot, i - 1)[0];
  if (global_layers_[i] == 0)  // null for a GPT: its embedding reads tokens
    return mb.inputs ? mb.inputs + row_rank_ * BoundaryRows(mb.rows()) * in_widths_[i] : nullptr;
  return range_input_[size_t(slot)];
}

template <typename T>
int64_t Model<T>::InWidth(size_t i) const {
  return in_widths_[i];
}

template <typename T>
int64_t Model<T>::OutRows(size_t i, int64_t rows) const {
  return all_rows_[global_layers_[i]] ? rows : BoundaryRows(rows);
}

template <typename T>
int64_t Model<T>::InRows(size_t i, int64_t rows) const {
  const size_t g = global_layers_[i];
  return g > 0 && all_rows_[g - 1] ? rows : BoundaryRows(rows);
}

const char *LayerPassName(LayerPass pass) {
  switch (pass) {
    case LayerPass::kForward:
      return "forward";
    case LayerPass::kRecompute:
      return "recompute";
    case LayerPass::kBackward:
      return "backward";
    case LayerPass::kBackwardInput:
      return "backward_input";
    case LayerPass::kBackwardWeight:
      return "backward_weight";
  }
  return "?";
}

namespace {

// Times `run` for the timer when one is set.
template <typename Run>
void Timed(LayerTimer *timer, LayerPass pass, size_t layer, int64_t rows, Run &&run) {
  if (timer == nullptr) {
    run();
    return;
  }
  const LayerTimer::TimePoint begin = std::chrono::steady_clock::now();
  run();
  timer->Record(pass, layer, rows, begin, std::chrono::steady_clock::now());
}

}  // namespace

template <typename T>
Status Model<T>::ForwardLayer(size_t i, int64_t slot, const T *in, MicroBatch<T> &mb,
                              LayerHooks *hooks, LayerPass pass) {
  LayerActivations<T> &act = activations_.at(slot, i);
  if (kv_cache_) mb.kv = kv_cache_->layer(i);
  // A recomputed loss layer must not add its loss to the step's sum again.
  double *const loss_sum =
      std::exchange(mb.loss_sum, pass == LayerPass::kRecompute ? nullptr : mb.loss_sum);
  Timed(timer_, pass, i, mb.rows(), [&] { layers_[i]->Forward(in, act, mb); });
  mb.loss_sum = loss_sum;
  DST_RETURN_IF_ERROR(TakeErrors(i));
  const bool rounded = activations_.AfterForward(slot, i, *kernels_, mb.backward_follows);
  if (!rounded && layers_[i]->OutWidth() > 0 && !fp32_layers_[i])
    RoundActivations(hooks, act[0], OutRows(i, mb.rows()) * layers_[i]->OutWidth());
  return Status::Ok();
}

// A failed collective of layer i, or a failed kernel of the backend.
template <typename T>
Status Model<T>::TakeErrors(size_t i) {
  DST_RETURN_IF_ERROR(layers_[i]->TakeError());
  return kernels_->TakeError();
}

template <typename T>
Status Model<T>::CheckPass(const char *what, int64_t slot, LayerRange range) const {
  if (activations_.options().bf16_operands && !Bf16Operands())  // no fp32 copies to write
    return InternalError(std::string("Model::") + what +
                         ": the activations were planned for bf16 GEMMs that keep their operands' "
                         "bf16 copies (ActivationOptions::bf16_operands), but the layers multiply "
                         "in fp32 or on a backend that keeps none");
  if (slot >= 0 && slot < activations_.slots() && range.end <= layers_.size() &&
      range.begin < range.end)
    return Status::Ok();
  return InternalError(std::string("Model::") + what + ": slot " + std::to_string(slot) + " of " +
                       std::to_string(activations_.slots()) + ", layers [" +
                       std::to_string(range.begin) + ", " + std::to_string(range.end) + ") of " +
                       std::to_string(layers_.size()));
}

template <typename T>
Status Model<T>::EnsureSaved(size_t i, int64_t slot, LayerRange range, MicroBatch<T> &mb,
                             LayerHooks *hooks, bool recomputable_too) {
  activations_.Restore(slot, i, *kernels_);
  if (i > range.begin)  // its output is this layer's input
    activations_.Restore(slot, i - 1, *kernels_);
  if (activations_.NeedsRecompute(slot, i)) {
    if (group_begin_[i] < range.begin || group_end_[i] > range.end)
      return InternalError("Model: recomputation group [" + std::to_string(group_begin_[i]) + ", " +
                           std::to_string(group_end_[i]) + ") crosses the pass's layers [" +
                           std::to_string(range.begin) + ", " + std::to_string(range.end) + ")");
    for (size_t j = group_begin_[i]; j < group_end_[i]; ++j) {
      if (hooks) DST_RETURN_IF_ERROR(hooks->BeforeForward(j));
      DST_RETURN_IF_ERROR(
          ForwardLayer(j, slot, InputOf(j, slot, range, mb), mb, hooks, LayerPass::kRecompute));
    }
  }
  if (recomputable_too && activations_.NeedsRecomputeSaved(slot, i)) {
    if (hooks) DST_RETURN_IF_ERROR(hooks->BeforeForward(i));
    Timed(timer_, LayerPass::kRecompute, i, mb.rows(), [&] {
      layers_[i]->RecomputeSaved(InputOf(i, slot, range, mb), activations_.at(slot, i), mb);
    });
    DST_RETURN_IF_ERROR(TakeErrors(i));
    activations_.AfterRecomputeSaved(slot, i, *kernels_);
  }
  return Status::Ok();
}

template <typename T>
Status Model<T>::Forward(int64_t slot, LayerRange range, const T *input, MicroBatch<T> &mb,
                         LayerHooks *hooks, const T **output) {
  DST_RETURN_IF_ERROR(CheckPass("Forward", slot, range));
  Prepare(mb);
  range_input_[size_t(slot)] = input;
  for (size_t i = range.begin; i < range.end; ++i) {
    if (hooks) DST_RETURN_IF_ERROR(hooks->BeforeForward(i));
    DST_RETURN_IF_ERROR(
        ForwardLayer(i, slot, InputOf(i, slot, range, mb), mb, hooks, LayerPass::kForward));
  }
  if (output)
    *output =
        layers_[range.end - 1]->OutWidth() > 0 ? activations_.at(slot, range.end - 1)[0] : nullptr;
  return kernels_->TakeError();  // the last layer's stash and rounding
}

template <typename T>
Status Model<T>::Backward(int64_t slot, LayerRange range, T *dout, T *din, MicroBatch<T> &mb,
                          LayerHooks *hooks) {
  DST_RETURN_IF_ERROR(CheckPass("Backward", slot, range));
  return RunBackward(BackwardHalf::kWhole, slot, range, dout, din, mb, hooks);
}

template <typename T>
Status Model<T>::BackwardInput(int64_t slot, LayerRange range, T *dout, T *din, MicroBatch<T> &mb,
                               LayerHooks *hooks) {
  DST_RETURN_IF_ERROR(CheckPass("BackwardInput", slot, range));
  if (!activations_.options().split_backward)
    return InternalError("Model::BackwardInput: the model keeps no deferred gradients");
  return RunBackward(BackwardHalf::kInput, slot, range, dout, din, mb, hooks);
}

template <typename T>
Status Model<T>::RunBackward(BackwardHalf half, int64_t slot, LayerRange range, T *dout, T *din,
                             MicroBatch<T> &mb, LayerHooks *hooks) {
  Prepare(mb);
  T *buffers[2] = {grad_a_.data(), grad_b_.data()};
  int next = 0;
  for (size_t i = range.end; i-- > range.begin;) {
    T *layer_din = i > range.begin ? buffers[next] : din;
    DST_RETURN_IF_ERROR(EnsureSaved(i, slot, range, mb, hooks, /*recomputable_too=*/true));
    if (hooks) {
      if (half == BackwardHalf::kWhole)
        DST_RETURN_IF_ERROR(hooks->BeforeBackward(i));
      else
        DST_RETURN_IF_ERROR(hooks->BeforeInputGradient(i));
    }
    const T *in = InputOf(i, slot, range, mb);
    if (half == BackwardHalf::kWhole) {
      Timed(timer_, LayerPass::kBackward, i, mb.rows(),
            [&] { layers_[i]->Backward(in, activations_.at(slot, i), dout, layer_din, mb); });
      DST_RETURN_IF_ERROR(TakeErrors(i));
      if (hooks) DST_RETURN_IF_ERROR(hooks->AfterBackward(i));
    } else {
      Timed(timer_, LayerPass::kBackwardInput, i, mb.rows(), [&] {
        layers_[i]->BackwardInput(in, activations_.at(slot, i), dout, layer_din,
                                  activations_.deferred(slot, i), mb);
      });
      DST_RETURN_IF_ERROR(TakeErrors(i));
    }
    if (layer_din && global_layers_[i] > 0 && !fp32_layers_[i])  // also what a stage sends back
      RoundActivations(hooks, layer_din, InRows(i, mb.rows()) * InWidth(i));
    dout = layer_din;
    next ^= 1;
  }
  return kernels_->TakeError();  // the first layer's input-gradient rounding
}

template <typename T>
Status Model<T>::BackwardWeight(int64_t slot, LayerRange range, MicroBatch<T> &mb,
                                LayerHooks *hooks) {
  DST_RETURN_IF_ERROR(CheckPass("BackwardWeight", slot, range));
  if (!activations_.options().split_backward)
    return InternalError("Model::BackwardWeight: the model keeps no deferred gradients");
  Prepare(mb);
  for (size_t i = range.end; i-- > range.begin;) {
    DST_RETURN_IF_ERROR(EnsureSaved(i, slot, range, mb, hooks, /*recomputable_too=*/false));
    if (hooks) DST_RETURN_IF_ERROR(hooks->BeforeWeightGradient(i));
    const T *in = InputOf(i, slot, range, mb);
    Timed(timer_, LayerPass::kBackwardWeight, i, mb.rows(), [&] {
      layers_[i]->BackwardWeight(in, activations_.at(slot, i), activations_.deferred(slot, i), mb);
    });
    DST_RETURN_IF_ERROR(TakeErrors(i));
    if (hooks) DST_RETURN_IF_ERROR(hooks->AfterBackward(i));
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
