#include "core/zero/data_parallel.h"

#include "core/zero/partition_policy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dst {

namespace {
// The tensors [offset, offset + numel) taken together.
TensorSpan OneSpan(const std::vector<TensorSpan> &spans) {
  int64_t end = 0;
  for (const TensorSpan &s : spans) end = std::max(end, s.offset + s.numel);
  return {0, end};
}
}  // namespace

namespace {

constexpr int64_t kChunk = 65536;  // elements widened at a time in a 16-bit step on the host

}  // namespace

ParamStoreOptions StoreOptionsForStage(int stage, int64_t dp_size, DType precision) {
  ParamStoreOptions options;
  options.pad_multiple = dp_size;
  const bool fp32 = precision == DType::kFloat32;
  options.full_grads = fp32 && stage < 2;
  options.full_values = fp32 && stage < 3;
  return options;
}

DataParallel::DataParallel(const Config &config, Model<float> *model, Communicator *dp,
                           MemoryTracker *tracker, const StateStoreMaker &make_store,
                           ParamSwapOptions param_swap, StepPlacement placement)
    : stage_(config.zero.stage),
      storage_(StorageOf(config.precision())),
      wire_(StorageOf(config.communication_data_type)),
      dp_(dp),
      model_(model),
      tracker_(tracker),
      layout_(model->params().size(), dp->size()),
      overlap_(config.zero.overlap_comm && dp->size() > 1),
      param_swap_(std::move(param_swap)),
      placement_(placement),
      ops_(placement),
      chunk_elements_(kChunk) {
  pre_scale_ =
      config.prescale_gradients ? 1.0 / double(dp->size()) : 1.0 / config.gradient_predivide_factor;
  if (stage_ < 3) param_swap_.path.clear();
  // 16-bit training reduces in fp32 or its own type (the config gate says so).
  if (Wide() && wire_ != StorageType::kFp32 && wire_ != storage_) wire_ = storage_;
  const ShardInfo all{0, layout_.padded};
  state_range_ = stage_ == 0 ? all : my_shard();
  // On a device, offload_optimizer (cpu, or nvme through its store) keeps the
  // optimizer's state and the master weights on the host (ZeRO-Offload).
  host_state_ = !placement_.on_host() &&
                (make_store != nullptr || config.zero.offload_optimizer_device == "cpu");
  // offload_param on a device: the parameter shard in host memory (and NVMe),
  // written by the optimizer there (the config gate pairs it with host_state_).
  params_on_host_ =
      !placement_.on_host() && stage_ >= 3 && config.zero.offload_param_device != "none";
  mirror_ = (make_store != nullptr || ParamsOffloaded() || host_state_) && !Wide();
  optimizer_ = std::make_unique<Optimizer>(SteppedOptimizer(config), state_range_.size, tracker,
                                           Wide() || mirror_, make_store,
                                           host_state_ ? StepPlacement{} : placement_);
  if (optimizer_->two_pass()) SetTensorParts();
  ParamStore<float> &store = model->params();
  const uint64_t seed = model->spec().seed;
  const int64_t bucket = std::max<int64_t>(1, config.zero.reduce_bucket_size);

  // Stage 3 keeps small tensors whole; 16 bits stage every tensor (no
  // persistence: nothing is partitioned) to widen it; fp32 below 3 stages none.
  const PartitionPolicy policy = PartitionPolicyFor(model->spec(), store.decls(), config);
  const int64_t persistence = stage_ >= 3 ? policy.persistence_threshold : (Wide() ? 0 : -1);
  plan_ = BuildPartitionPlan(store.decls(), model->layer_params(), persistence,
                             stage_ >= 3 ? policy.whole_by_type : std::vector<bool>{},
                             Wide() ? policy.fp32 : std::vector<bool>{});
  if (!plan_.fp32.slots.empty())
    fp32_ = std::make_unique<Fp32Params>(&plan_, &store, tracker, seed, placement_);
  if (Wide() && stage_ < 3) local_ = MakeSoloCommunicator("local");
  const ShardLayout local_layout(layout_.padded, 1);

  if (stage_ >= 3)
    params_ = std::make_unique<ParameterPartition>(
        &plan_, layout_, dp_, &store, tracker, seed, config.zero.stage3_prefetch_bucket_size,
        storage_, param_swap_.path.empty() ? -1 : param_swap_.max_in_cpu, placement_,
        params_on_host_);
  else if (Wide())
    params_ = std::make_unique<ParameterPartition>(&plan_, local_layout, local_.get(), &store,
                                                   tracker, seed, 0, storage_, -1, placement_);
  // The layers read their GEMM weights' bf16 copies where they multiply in bf16.
  if (params_ && model->Bf16Operands()) params_->SkipWideningBf16GemmWeights();
  // 16 bits: the gradients widened a chunk at a time where they live; with
  // the state on the host, master weights go up through it.
  if (!placement_.on_host())  // no bigger than the state range
    chunk_elements_ = std::min(int64_t(placement_.memory->chunk_bytes() / sizeof(float)),
                               std::max<int64_t>(1, state_range_.size));
  if (Wide() || host_state_)
    chunk_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(chunk_elements_),
                           placement_.memory);
  if (host_state_) {
    const bool pinned = config.zero.offload_optimizer_pin_memory;
    const size_t chunk_bytes = size_t(chunk_elements_) * sizeof(float);
    for (int b = 0; b < 2; ++b) {
      down_[b] = HostStaging(placement_.memory, chunk_bytes, pinned, tracker);
      if (Wide()) up_[b] = HostStaging(placement_.memory, chunk_bytes / 2, pinned, tracker);
    }
    // The sums are final after a reduction (ZeRO 2/3: to the owners; 0/1:
    // the buckets', with more than one rank). Zeroed: the padding is never
    // copied down.
    if (stage_ >= 2 || dp->size() > 1) {
      const size_t bytes = size_t(state_range_.size) * ElementBytes(storage_);
      host_grads_ =
          HostStaging(placement_.memory, bytes, pinned, tracker, MemoryCategory::kGradients);
      std::memset(host_grads_.as<void>(), 0, bytes);
    }
  }

  const CodecOptions codec = CodecOptionsOf(config.gradient_compression, config.optimizer);
  compression_warmup_ = config.gradient_compression.warmup_steps;
  GradPartitionOptions grad_options;
  grad_options.bucket_elements = bucket;
  grad_options.storage = storage_;
  grad_options.wire = wire_;
  if (stage_ >= 2) {
    grad_options.double_buffer = overlap_;
    // A pipeline stage's micro-batches run a layer's backward at times spread
    // over the step: ZeRO 2 accumulates them locally and reduces once.
    grad_options.once_per_step = stage_ == 2 && config.pp_size > 1;
    if (config.gradient_compression.enabled) grad_options.codec = &codec;
    grads_ = std::make_unique<GradientPartition>(&plan_, layout_, dp_, &store, tracker,
                                                 grad_options, placement_);
    if (!host_grads_.empty())
      grads_->SetOnFinal([this](int64_t begin, int64_t count) { GradsFinal(begin, count); });
  } else if (Wide()) {
    grads_ = std::make_unique<GradientPartition>(&plan_, local_layout, local_.get(), &store,
                                                 tracker, grad_options, placement_);
  }
  const OptimizerType type = config.optimizer.type;
  const bool one_bit = type == OptimizerType::kOneBitAdam || type == OptimizerType::kZeroOneAdam ||
                       type == OptimizerType::kOneBitLamb;
  if (one_bit && stage_ == 0 && dp_->size() > 1) {
    std::vector<TensorSpan> spans;
    for (const ParamDecl &d : model->params().decls()) spans.push_back({d.offset, d.numel});
    // 1-bit LAMB exchanges every tensor's (rescaled) momentum as one.
    if (type == OptimizerType::kOneBitLamb) spans = {OneSpan(spans)};
    onebit_ = std::make_unique<OneBitAllReduce>(dp_, std::move(spans), tracker);
  }
  if (stage_ <= 1) {
    buckets_ = std::make_unique<BucketReducer>(
        layout_, stage_, dp_, FullGrads(), storage_, wire_, bucket, tracker,
        config.gradient_compression.enabled ? &codec : nullptr, placement_);
    if (!host_grads_.empty())
      buckets_->SetOnReduced([this](int64_t begin, int64_t count) { GradsFinal(begin, count); });
  }
}

const CompressionTotals *DataParallel::compression_totals() const {
  if (buckets_ && buckets_->compressor()) return &buckets_->compressor()->totals();
  if (grads_ && grads_->compressor()) return &grads_->compressor()->totals();
  return nullptr;
}

Status DataParallel::Start() {
  DST_RETURN_IF_ERROR(optimizer_->state().Open());
  DST_RETURN_IF_ERROR(StartParamSwap());
  if (!ResumableSteps().empty()) return Status::Ok();  // the engine: ResumeAt or StartFresh
  return StartFresh();
}

Result<std::string> DataParallel::ResumeAt(int64_t step) {
  Result<std::string> note = optimizer_->state().ResumeAt(step);
  if (!note.ok()) return note.status();
  optimizer_->set_steps_taken(step);
  DST_RETURN_IF_ERROR(ParamsFromMasters());
  return note;
}

Status DataParallel::StartFresh() {
  if (!optimizer_->master_weights()) return Status::Ok();
  // 16 bits: the master weights are the fp32 initialisation of the state
  // range (a pure function of the element, as the 16-bit parameters are its
  // rounding); fp32: a copy of the parameters.
  ParamStore<float> &store = model_->params();
  const uint64_t seed = model_->spec().seed;
  return ForEachStatePiece(/*modified=*/true, [&](const StatePiece &piece) {
    const int64_t begin = state_range_.offset + piece.begin;
    if (mirror_ && !MastersAreParams()) {
      ParamsToMasters(piece);
    } else if (ops_.on_host() || host_state_) {
      store.InitializeRange(seed, begin, begin + piece.count, piece.tensors[0]);
    } else {  // made on the host, a chunk at a time
      std::vector<float> host(static_cast<size_t>(std::min(chunk_elements_, piece.count)));
      for (int64_t c = 0; c < piece.count; c += chunk_elements_) {
        const int64_t n = std::min(chunk_elements_, piece.count - c);
        store.InitializeRange(seed, begin + c, begin + c + n, host.data());
        ops_.Upload(piece.tensors[0] + c, host.data(), size_t(n) * sizeof(float));
      }
    }
    return Status::Ok();
  });
}

Status DataParallel::StartParamSwap() {
  if (!ParamsOffloaded() || params_->swapped_elements() == 0) return Status::Ok();
  const int64_t share = params_->largest_swapped_share();
  if (share > param_swap_.buffer_size)
    return ConfigError("zero_optimization.offload_param.buffer_size is " +
                       std::to_string(param_swap_.buffer_size) +
                       " elements, but a layer's share of this rank's swapped parameters is " +
                       std::to_string(share) + "; raise buffer_size to at least " +
                       std::to_string(share));
  ParamSwapOptions options = param_swap_;
  const int64_t bytes = int64_t(ElementBytes(storage_));
  options.bytes = params_->swapped_elements() * bytes;
  options.window_bytes = share * bytes;
  Result<std::unique_ptr<ParamSwap>> swap = ParamSwap::Create(options, tracker_);
  if (!swap.ok()) return swap.status();
  return params_->AttachSwap(std::move(swap).value());
}

Status DataParallel::ForEachStatePiece(bool modified,
                                       const std::function<Status(const StatePiece &)> &fn) {
  StateStore &state = optimizer_->state();
  DST_RETURN_IF_ERROR(state.BeginPass(optimizer_->steps_taken()));
  const int64_t step = state.piece_elements();
  for (int64_t c = 0; c < state_range_.size; c += step) {
    StatePiece piece;
    Status st = optimizer_->AcquireState(c, std::min(step, state_range_.size - c), &piece);
    if (st.ok()) st = fn(piece);
    if (st.ok()) st = state.Release(piece, modified);
    if (!st.ok()) {
      state.AbortPass();
      return st;
    }
  }
  return state.EndPass();
}

// Waits for collectives in flight before the buffers they use go away.
DataParallel::~DataParallel() {
  buckets_.reset();
  params_.reset();
  grads_.reset();
}

const std::vector<GradBucket> &DataParallel::buckets() const {
  static const std::vector<GradBucket> kNone;
  return buckets_ ? buckets_->buckets() : kNone;
}

std::optional<Half> DataParallel::activation_half() const {
  if (!Wide()) return std::nullopt;
  return storage_ == StorageType::kFp16 ? Half::kFp16 : Half::kBf16;
}

void DataParallel::ToHost(const float *src, int64_t n, float *host) const {
  ops_.Download(host, src, size_t(n) * sizeof(float));
}

void DataParallel::FromHost(const float *host, int64_t n, float *dst) const {
  ops_.Upload(dst, host, size_t(n) * sizeof(float));
}

double DataParallel::SquaresOf(const void *grads, int64_t n) const {
  return ops_.SumOfSquares(storage_, grads, n);
}

void *DataParallel::FullGrads() {
  return grads_ ? grads_->shard() : model_->params().grads();
}

void *DataParallel::StateGrads() {
  if (stage_ >= 2) return grads_->shard();
  return static_cast<uint8_t *>(FullGrads()) + size_t(state_range_.offset) * ElementBytes(storage_);
}

float *DataParallel::StateParams() {
  if (params_) return params_->shard_f32();  // stage 3: the shard is the state range
  return model_->params().values() + state_range_.offset;
}

// ---------------------------------------------------------------- backward

Status DataParallel::ZeroGradients() {
  gathered_grads_ = FlatBuffer();
  grads_gathered_ = false;
  launch_buckets_ = false;
  clip_coef_ = 1;
  grads_on_host_ = !host_grads_.empty();
  host_scalings_.clear();
  if (fp32_) fp32_->ZeroGrads();
  Status st = buckets_ ? buckets_->Reset() : Status::Ok();
  const int64_t next = optimizer_->steps_taken() + 1;
  local_grads_ = onebit_ && !optimizer_->ReducesGradients(next);
  if (onebit_ && optimizer_->RestartsExchangeErrors(next)) onebit_->ResetErrors();
  if (buckets_) buckets_->SetLocal(local_grads_);
  // gradient_compression's warm-up: the first steps reduce uncompressed.
  const bool compressed = next > compression_warmup_;
  if (buckets_) buckets_->SetCompressed(compressed);
  if (grads_) grads_->SetCompressed(compressed);
  if (grads_) {
    Status zero = grads_->Zero();
    if (st.ok()) st = zero;
  } else {
    step().ZeroRange(layout_.padded, model_->params().grads());
  }
  return st;
}

Status DataParallel::BeforeForward(size_t layer) {
  if (!params_) return Status::Ok();
  const size_t layers = model_->layers().size();
  return params_->Acquire(layer, layer + 1 < layers ? int64_t(layer + 1) : -1);
}

Status DataParallel::BeforeBackward(size_t layer) {
  if (params_) DST_RETURN_IF_ERROR(params_->Acquire(layer, int64_t(layer) - 1));
  if (grads_) DST_RETURN_IF_ERROR(grads_->BeforeBackward(layer));
  return Status::Ok();
}

// Split backward: the input half reads the layer's parameters only; the
// weight half writes its gradients (staged and reduced as a whole backward's
// would be) and reads no parameter (a recomputed forward acquires them
// through BeforeForward).
Status DataParallel::BeforeInputGradient(size_t layer) {
  if (params_) DST_RETURN_IF_ERROR(params_->Acquire(layer, int64_t(layer) - 1));
  return Status::Ok();
}

Status DataParallel::BeforeWeightGradient(size_t layer) {
  if (grads_) DST_RETURN_IF_ERROR(grads_->BeforeBackward(layer));
  return Status::Ok();
}

Status DataParallel::AfterBackward(size_t layer) {
  if (grads_) DST_RETURN_IF_ERROR(grads_->AfterBackward(layer));
  if (buckets_ && launch_buckets_)
    return buckets_->LaunchAbove(model_->GradientsFinalBoundary(layer));
  return Status::Ok();
}

// ---------------------------------------------------------------- reduction and step

Status DataParallel::FinishReduction() {
  if (local_grads_) {  // each rank's own gradients: only the predivision undone (fp32)
    if (Wide() || pre_scale_ == 1.0) return Status::Ok();
    step().ScaleRange(float(1.0 / pre_scale_), state_range_.size,
                      static_cast<float *>(StateGrads()));
    return step().TakeError();
  }
  if (stage_ >= 2)
    DST_RETURN_IF_ERROR(grads_->Drain());
  else
    DST_RETURN_IF_ERROR(buckets_->Finish());
  if (fp32_) DST_RETURN_IF_ERROR(fp32_->ReduceGrads(*dp_));
  if (Wide()) return Status::Ok();  // 16 bits: averaged in the step
  if (pre_scale_ == 1.0 && dp_->size() == 1) return Status::Ok();
  const float k = pre_scale_ == 1.0 ? 1.0f / float(dp_->size())
                                    : float(1.0 / (double(dp_->size()) * pre_scale_));
  step().ScaleRange(k, state_range_.size, static_cast<float *>(StateGrads()));
  if (grads_on_host_) host_scalings_.push_back(k);
  return step().TakeError();
}

void DataParallel::GradsFinal(int64_t begin, int64_t count) {
  const size_t bytes = ElementBytes(storage_), at = size_t(begin - state_range_.offset) * bytes;
  grads_down_ = placement_.memory->DownloadAsync(host_grads_.as<uint8_t>() + at,
                                                 static_cast<const uint8_t *>(StateGrads()) + at,
                                                 size_t(count) * bytes);
}

Result<double> DataParallel::GradNorm() {
  const double f = GradFactor();
  double local = SquaresOf(StateGrads(), state_range_.size);
  DST_RETURN_IF_ERROR(step().TakeError());
  if (fp32_) local += fp32_->GradSquares(state_range_);  // zero in the 16-bit buffer
  local *= f * f;
  if (stage_ >= 1 || local_grads_) {  // summed over the shards in fp32
    Result<double> summed = SquaresOverRanks(local);
    if (!summed.ok()) return summed.status();
    local = summed.value();
  }
  return std::sqrt(local);
}

Result<double> DataParallel::GradSquaredNorm(const std::vector<int> &excluded) {
  const double f = GradFactor();
  double local = SquaresOf(StateGrads(), state_range_.size);
  for (int id : excluded) {
    const ShardInfo part = StatePartOf(id);
    const uint8_t *grads = static_cast<const uint8_t *>(StateGrads());
    local -= SquaresOf(grads + size_t(part.offset - state_range_.offset) * ElementBytes(storage_),
                       part.size);
  }
  DST_RETURN_IF_ERROR(step().TakeError());
  if (fp32_) local += fp32_->GradSquares(state_range_, excluded);
  local *= f * f;
  if (stage_ >= 1 || local_grads_) return SquaresOverRanks(local);
  return local;
}

// The shards' squares summed in fp32; each rank's own gradients (1-bit
// Adam's compressed steps) averaged instead, so that every rank clips by the
// same coefficient and skips an overflowed step with the others.
Result<double> DataParallel::SquaresOverRanks(double local) {
  if (dp_->size() == 1) return local;
  float v = float(local);
  DST_RETURN_IF_ERROR(dp_->AllReduceSum(&v, 1)->Wait());
  return local_grads_ ? double(v) / double(dp_->size()) : double(v);
}

ShardInfo DataParallel::StatePartOf(int id) const {
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  const int64_t begin = std::max(d.offset, state_range_.offset);
  const int64_t end = std::min(d.offset + d.numel, state_range_.offset + state_range_.size);
  return {begin, std::max<int64_t>(end - begin, 0)};
}

Status DataParallel::ReadStoredGradient(int id, float *out) {
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  if (const TensorSlot *slot = fp32_ ? fp32_->Find(id) : nullptr) {  // whole on every rank
    step().CopyRange(fp32_->grads(*slot), d.numel, out);
    return Status::Ok();
  }
  const ShardInfo part = StatePartOf(id);
  ops_.ZeroFloats(out, d.numel);
  const uint8_t *grads = static_cast<const uint8_t *>(StateGrads());
  ops_.Widen(storage_, grads + size_t(part.offset - state_range_.offset) * ElementBytes(storage_),
             out + (part.offset - d.offset), part.size);
  // Stages 1-3: the shards are disjoint, so their sum is the whole tensor.
  if (stage_ >= 1 && dp_->size() > 1) DST_RETURN_IF_ERROR(dp_->AllReduceSum(out, d.numel)->Wait());
  return Status::Ok();
}

Status DataParallel::AddStoredGradient(int id, const float *in) {
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  if (const TensorSlot *slot = fp32_ ? fp32_->Find(id) : nullptr) {
    step().AddRange(in, d.numel, fp32_->grads(*slot));
    return Status::Ok();
  }
  const ShardInfo part = StatePartOf(id);
  uint8_t *grads = static_cast<uint8_t *>(StateGrads());
  grads_on_host_ = false;  // the device's copy changed after it came down
  ops_.AddInto(storage_, in + (part.offset - d.offset),
               grads + size_t(part.offset - state_range_.offset) * ElementBytes(storage_),
               part.size);
  return Status::Ok();
}

void DataParallel::ScaleGradients(float k) {
  if (Wide()) {
    clip_coef_ *= double(k);
    return;
  }
  step().ScaleRange(k, state_range_.size, static_cast<float *>(StateGrads()));
  if (grads_on_host_) host_scalings_.push_back(k);
}

Status DataParallel::MasterToParams(int64_t begin, int64_t count, const float *master) {
  if (fp32_) fp32_->TakeValues(state_range_.offset + begin, count, master);
  const int64_t at = ParamIndex(begin);
  if (params_->Resident(at, count)) {
    ops_.Narrow(storage_, master, HalfParams(begin), count);
    return Status::Ok();
  }
  return NarrowIntoShard(at, master, count);
}

Status DataParallel::NarrowIntoShard(int64_t at, const float *master, int64_t count) {
  uint16_t half[kChunk];
  for (int64_t c = 0; c < count; c += kChunk) {
    const int64_t n = std::min(kChunk, count - c);
    Narrow(storage_, master + c, half, n);
    DST_RETURN_IF_ERROR(params_->WriteShard(at + c, half, n, /*from_host=*/true));
  }
  return Status::Ok();
}

Status DataParallel::ShareParams() {
  if ((stage_ == 1 || stage_ == 2) && dp_->size() > 1) {
    void *all = Wide() ? params_->shard() : static_cast<void *>(model_->params().values());
    DST_RETURN_IF_ERROR(AllGather(*dp_, storage_, all, layout_.shard_size())->Wait());
  }
  if (fp32_ && stage_ >= 1) DST_RETURN_IF_ERROR(fp32_->ShareValues(*dp_, state_range_));
  return params_ ? params_->ShardChanged() : Status::Ok();
}

Status DataParallel::Step(double lr) {
  if (params_) DST_RETURN_IF_ERROR(params_->Drain());
  optimizer_->BeginStep();
  int64_t touched = 0;
  const auto update = [&](const StatePiece &piece) { return UpdatePiece(piece, lr); };
  Status st = optimizer_->two_pass() ? TwoPassStep(lr, &touched) : UpdatePieces(&touched, update);
  clip_coef_ = 1;
  if (!st.ok()) return RollBack(touched, std::move(st));
  return ShareParams();
}

void DataParallel::SetTensorParts() {
  const std::vector<ParamDecl> &decls = model_->params().decls();
  std::vector<TensorPart> parts;
  for (size_t id = 0; id < decls.size(); ++id) {
    const ShardInfo part = StatePartOf(int(id));
    if (part.size > 0) parts.push_back({int(id), part.offset - state_range_.offset, part.size});
  }
  optimizer_->SetTensorParts(std::move(parts), int(decls.size()));
}

// Lamb: the moments pass (the gradients' whole path, the weights as they
// were), each tensor's sums added over the shards (stages 1-3) and the
// reducer's group, then the apply pass from the state alone.
Status DataParallel::TwoPassStep(double lr, int64_t *touched) {
  int64_t moments = 0;  // the first pass moves no weight
  DST_RETURN_IF_ERROR(
      UpdatePieces(&moments, [&](const StatePiece &piece) { return UpdatePiece(piece, lr); }));
  if (optimizer_->exchange() == Optimizer::Exchange::kAccumulator) {
    if (onebit_) DST_RETURN_IF_ERROR(onebit_->Run(optimizer_->accumulator()));
  } else if (optimizer_->exchange() == Optimizer::Exchange::kMomentum) {
    if (onebit_) DST_RETURN_IF_ERROR(ExchangeMomentum());
  } else {
    std::vector<double> &sums = optimizer_->trust_sums();
    if (stage_ >= 1 && dp_->size() > 1) {
      std::vector<float> wire(sums.begin(), sums.end());
      DST_RETURN_IF_ERROR(dp_->AllReduceSum(wire.data(), int64_t(wire.size()))->Wait());
      std::copy(wire.begin(), wire.end(), sums.begin());
    }
    if (trust_reducer_) DST_RETURN_IF_ERROR(trust_reducer_(&sums));
  }
  optimizer_->BeginApplyPass();
  return UpdatePieces(touched, [&](const StatePiece &piece) { return ApplyPiece(piece, lr); });
}

// 1-bit Adam: every rank's momentum (from its own gradients) replaced by
// their compressed mean; the state is in memory at stage 0.
Status DataParallel::ExchangeMomentum() {
  const float *exp_avg = optimizer_->state().Resident(optimizer_->first_state_tensor());
  if (exp_avg == nullptr) return InternalError("1-bit Adam's momentum is not in host memory");
  return onebit_->Run(const_cast<float *>(exp_avg));
}

Status DataParallel::ApplyPiece(const StatePiece &piece, double lr) {
  if (!Wide() && !mirror_ && !host_state_) {  // fp32 weights updated in place
    optimizer_->Update(piece, StateParams() + piece.begin, nullptr, lr);
    return step().TakeError();
  }
  optimizer_->Update(piece, nullptr, nullptr, lr);  // the master weights
  DST_RETURN_IF_ERROR(step().TakeError());
  return StateToParams(piece.begin, piece.count, piece.tensors[0]);
}

Status DataParallel::UpdatePieces(int64_t *touched,
                                  const std::function<Status(const StatePiece &)> &update) {
  StateStore &state = optimizer_->state();
  DST_RETURN_IF_ERROR(state.BeginPass(optimizer_->steps_taken()));
  if (params_) DST_RETURN_IF_ERROR(params_->BeginShardWrite());
  if (grads_on_host_) placement_.memory->WaitCopy(grads_down_);  // the backward's copies
  const int64_t step = state.piece_elements();
  for (int64_t c = 0; c < state_range_.size; c += step) {
    StatePiece piece;
    DST_RETURN_IF_ERROR(optimizer_->AcquireState(c, std::min(step, state_range_.size - c), &piece));
    *touched = piece.begin + piece.count;
    DST_RETURN_IF_ERROR(update(piece));
    DST_RETURN_IF_ERROR(state.Release(piece, true));
  }
  // The swapped parameters commit first: should the state's commit fail,
  // RollBack rewrites them from the masters it committed last.
  if (params_) DST_RETURN_IF_ERROR(params_->EndShardWrite(optimizer_->steps_taken()));
  return state.EndPass();
}

namespace {
// Elements [c, c + n) of a piece.
StatePiece PartOf(const StatePiece &piece, int64_t c, int64_t n) {
  StatePiece part = piece;
  part.begin = piece.begin + c;
  part.count = n;
  for (float *&t : part.tensors)
    if (t) t += c;
  return part;
}
}  // namespace

void DataParallel::ParamsToMasters(const StatePiece &piece) {
  if (host_state_)
    ToHost(StateParams() + piece.begin, piece.count, piece.tensors[0]);
  else
    step().CopyRange(StateParams() + piece.begin, piece.count, piece.tensors[0]);
}

Status DataParallel::StateToParams(int64_t begin, int64_t count, const float *master) {
  return host_state_ ? HostMastersToParams(begin, count, master)
                     : MastersToParams(begin, count, master);
}

Status DataParallel::WriteHalfParams(int64_t begin, int64_t n, const uint16_t *host) {
  const int64_t at = ParamIndex(begin);
  if (params_->Resident(at, n)) {
    ops_.Upload(HalfParams(begin), host, size_t(n) * sizeof(uint16_t));
    return Status::Ok();
  }
  return params_->WriteShard(at, host, n, /*from_host=*/true);
}

Status DataParallel::UpdatePiece(const StatePiece &piece, double lr) {
  if (!Wide()) {  // fp32: the parameters updated in place, or their mirror and a copy
    const float *grads = static_cast<const float *>(StateGrads()) + piece.begin;
    if (host_state_) {       // the gradients down a chunk at a time, CPU-Adam, the weights up
      if (grads_on_host_) {  // down already: the device's averaging and clipping, replayed
        float *g = host_grads_.as<float>() + piece.begin;
        for (const float k : host_scalings_)
          for (int64_t i = 0; i < piece.count; ++i) g[i] *= k;
      }
      DST_RETURN_IF_ERROR(StreamGradsDown(
          piece, grads, sizeof(float), [&](const StatePiece &part, const void *down, int) {
            optimizer_->Update(part, nullptr, static_cast<const float *>(down), lr);
            return Status::Ok();
          }));
      return StateToParams(piece.begin, piece.count, piece.tensors[0]);
    }
    if (mirror_) {
      optimizer_->Update(piece, nullptr, grads, lr);
      return MastersToParams(piece.begin, piece.count, piece.tensors[0]);
    }
    optimizer_->Update(piece, StateParams() + piece.begin, grads, lr);
    return step().TakeError();
  }
  if (host_state_) return UpdateHostPiece(piece, lr);
  // 16 bits: widen the gradients a chunk at a time; CPU-Adam unscales and
  // clips them, updates the master weights and writes their 16-bit copy
  // into the parameters in one pass (SGD: the same in three).
  const float factor = float(clip_coef_ * GradFactor());
  const uint16_t *grads = static_cast<const uint16_t *>(StateGrads()) + piece.begin;
  const bool fused = optimizer_->fuses();
  float *chunk = chunk_.data();
  uint16_t half[kChunk];  // the 16-bit copy of a chunk whose parameters are swapped (host)
  for (int64_t c = 0; c < piece.count; c += chunk_elements_) {
    const int64_t n = std::min(chunk_elements_, piece.count - c);
    ops_.Widen(storage_, grads + c, chunk, n);
    if (fp32_) fp32_->OverlayGrads(state_range_.offset + piece.begin + c, n, chunk);
    const StatePiece part = PartOf(piece, c, n);
    if (fused) {
      const int64_t at = ParamIndex(part.begin);
      uint16_t *out = params_->Resident(at, n) ? HalfParams(part.begin) : half;
      if (out == half && n > kChunk)  // swapped parameters are a host placement's
        return InternalError("a 16-bit update chunk of swapped parameters exceeds its buffer");
      optimizer_->Update(part, nullptr, chunk, lr, {factor, out, HalfOf(storage_)});
      if (fp32_) fp32_->TakeValues(state_range_.offset + part.begin, n, part.tensors[0]);
      if (out == half) DST_RETURN_IF_ERROR(params_->WriteShard(at, half, n));
      continue;
    }
    step().ScaleRange(factor, n, chunk);
    optimizer_->Update(part, nullptr, chunk, lr);
    DST_RETURN_IF_ERROR(MasterToParams(part.begin, n, part.tensors[0]));
  }
  return Status::Ok();
}

template <typename Update>
Status DataParallel::StreamGradsDown(const StatePiece &piece, const void *grads, size_t bytes,
                                     Update update) {
  if (grads_on_host_) {  // copied down during the backward (UpdatePieces waited for them)
    const uint8_t *host = host_grads_.as<const uint8_t>() + size_t(piece.begin) * bytes;
    int b = 0;
    for (int64_t c = 0; c < piece.count; c += chunk_elements_, b ^= 1) {
      const int64_t n = std::min(chunk_elements_, piece.count - c);
      DST_RETURN_IF_ERROR(update(PartOf(piece, c, n), host + size_t(c) * bytes, b));
    }
    return Status::Ok();
  }
  MemoryResource &device = *placement_.memory;
  const auto *src = static_cast<const uint8_t *>(grads);
  uint64_t ready[2] = {0, 0};
  const auto queue = [&](int64_t c, int b) {
    const int64_t n = std::min(chunk_elements_, piece.count - c);
    ready[b] =
        device.DownloadAsync(down_[b].as<void>(), src + size_t(c) * bytes, size_t(n) * bytes);
  };
  if (piece.count > 0) queue(0, 0);
  int b = 0;
  for (int64_t c = 0; c < piece.count; c += chunk_elements_, b ^= 1) {
    const int64_t n = std::min(chunk_elements_, piece.count - c);
    // The other buffer's chunk was updated in the last round: it takes the next one.
    if (c + n < piece.count) queue(c + n, b ^ 1);
    device.WaitCopy(ready[b]);
    Status st = update(PartOf(piece, c, n), down_[b].as<const void>(), b);
    if (!st.ok()) {
      device.WaitCopy(std::max(ready[0], ready[1]));  // no copy left writing a buffer
      return st;
    }
  }
  return Status::Ok();
}

Status DataParallel::SendHalfParams(int64_t begin, int64_t n, const uint16_t *half,
                                    uint64_t *sent) {
  const int64_t at = ParamIndex(begin);
  if (!params_->Resident(at, n)) return WriteHalfParams(begin, n, half);
  *sent = placement_.memory->UploadAsync(HalfParams(begin), half, size_t(n) * sizeof(uint16_t));
  return Status::Ok();
}

// 16 bits with the state on the host (ZeRO-Offload): each chunk's 16-bit
// gradients down (the next chunk's copy running meanwhile), widened,
// CPU-Adam's update with the 16-bit copy written in the same pass into a
// staging buffer, that copy up while the next chunk is updated (2 bytes a
// parameter each way).
Status DataParallel::UpdateHostPiece(const StatePiece &piece, double lr) {
  const float factor = float(clip_coef_ * GradFactor());
  const uint16_t *grads = static_cast<const uint16_t *>(StateGrads()) + piece.begin;
  std::vector<float> chunk(static_cast<size_t>(chunk_elements_));
  uint64_t sent[2] = {0, 0};
  const Status st = StreamGradsDown(
      piece, grads, sizeof(uint16_t), [&](const StatePiece &part, const void *down, int b) {
        const int64_t n = part.count;
        Widen(storage_, static_cast<const uint16_t *>(down), chunk.data(), n);
        const int64_t flat = state_range_.offset + part.begin;
        if (fp32_) fp32_->OverlayGrads(flat, n, chunk.data(), /*host_dst=*/true);
        uint16_t *half = up_[b].as<uint16_t>();
        placement_.memory->WaitCopy(sent[b]);  // its copy two chunks back has left
        if (optimizer_->fuses()) {
          optimizer_->Update(part, nullptr, chunk.data(), lr, {factor, half, HalfOf(storage_)});
        } else {
          for (int64_t i = 0; i < n; ++i) chunk[size_t(i)] *= factor;
          optimizer_->Update(part, nullptr, chunk.data(), lr);
          Narrow(storage_, part.tensors[0], half, n);
        }
        if (fp32_) fp32_->TakeValues(flat, n, part.tensors[0], /*host_src=*/true);
        return SendHalfParams(part.begin, n, half, &sent[b]);
      });
  placement_.memory->WaitCopy(std::max(sent[0], sent[1]));  // the last ones up
  return st;
}

uint16_t *DataParallel::HalfParams(int64_t begin) {
  // The 16-bit parameters cover the state range: all of them below stage 3
  // (stage 0: the range is everything), this rank's shard at 3.
  return static_cast<uint16_t *>(params_->shard()) + ParamIndex(begin);
}

Status DataParallel::MastersToParams(int64_t begin, int64_t count, const float *master) {
  if (Wide()) return MasterToParams(begin, count, master);
  if (params_) return params_->WriteShard(begin, master, count);  // stage 3: the shard
  step().CopyRange(master, count, StateParams() + begin);
  return Status::Ok();
}

Status DataParallel::HostMastersToParams(int64_t begin, int64_t count, const float *master) {
  if (ops_.on_host()) return MastersToParams(begin, count, master);
  if (params_on_host_) {  // host to host: the shard is in host memory
    if (!Wide()) return params_->WriteShard(ParamIndex(begin), master, count, /*from_host=*/true);
    if (fp32_) fp32_->TakeValues(state_range_.offset + begin, count, master, /*host_src=*/true);
    return NarrowIntoShard(ParamIndex(begin), master, count);
  }
  for (int64_t c = 0; c < count; c += chunk_elements_) {  // through the device's chunk buffer
    const int64_t n = std::min(chunk_elements_, count - c);
    ops_.Upload(chunk_.data(), master + c, size_t(n) * sizeof(float));
    DST_RETURN_IF_ERROR(MastersToParams(begin + c, n, chunk_.data()));
  }
  return Status::Ok();
}

Status DataParallel::RollBack(int64_t touched, Status failure) {
  StateStore &state = optimizer_->state();
  state.AbortPass();
  optimizer_->set_steps_taken(optimizer_->steps_taken() - 1);
  // Swapped parameters are rewritten whole, in one pass.
  const bool swapped = params_ && params_->offloaded();
  if (swapped) params_->AbortShardWrite();
  if (swapped) touched = state_range_.size;
  Status restored = swapped ? params_->BeginShardWrite() : Status::Ok();
  if (optimizer_->master_weights() && touched > 0) {
    std::vector<float> master(size_t(std::min(state.piece_elements(), touched)));
    for (int64_t c = 0; c < touched && restored.ok(); c += int64_t(master.size())) {
      const int64_t n = std::min(int64_t(master.size()), touched - c);
      restored = state.Read(0, c, n, master.data());
      if (restored.ok()) restored = HostMastersToParams(c, n, master.data());
    }
  }
  if (swapped) {
    if (restored.ok()) restored = params_->EndShardWrite(optimizer_->steps_taken());
    if (!restored.ok()) params_->AbortShardWrite();
  }
  if (!restored.ok())
    return failure.context("optimizer step " + std::to_string(optimizer_->steps_taken() + 1) +
                           " failed and the weights it had updated could not be restored (" +
                           restored.message() + "); load the last checkpoint");
  return failure.context("optimizer step " + std::to_string(optimizer_->steps_taken() + 1) +
                         " failed; nothing changed (the weights and the optimizer state are "
                         "those before the step)");
}

Status DataParallel::GatherGradients() {
  if (stage_ == 1 && dp_->size() > 1)
    DST_RETURN_IF_ERROR(AllGather(*dp_, storage_, FullGrads(), layout_.shard_size())->Wait());
  if (stage_ >= 2) {
    gathered_grads_ = FlatBuffer(tracker_, MemoryCategory::kGradients, storage_, layout_.padded,
                                 placement_.memory);
    const ShardInfo s = my_shard();
    ops_.Copy(storage_, grads_->shard(), gathered_grads_.at(s.offset), s.size);
    if (dp_->size() > 1)
      DST_RETURN_IF_ERROR(AllGather(*dp_, storage_, gathered_grads_.at(0), s.size)->Wait());
  }
  grads_gathered_ = true;
  return Status::Ok();
}

// ---------------------------------------------------------------- whole tensors

Status DataParallel::ReadParam(int id, float *out) {
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  if (const TensorSlot *slot = fp32_ ? fp32_->Find(id) : nullptr) {
    ToHost(fp32_->values(*slot), d.numel, out);
    return Status::Ok();
  }
  if (params_) return params_->Read(id, out);
  ToHost(model_->params().values() + d.offset, d.numel, out);
  return Status::Ok();
}

Status DataParallel::WriteParam(int id, const float *in) {
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  if (optimizer_->master_weights()) {  // the master weights this rank holds, then the parameters
    const int64_t b = std::max(state_range_.offset, d.offset);
    const int64_t e = std::min(state_range_.offset + state_range_.size, d.offset + d.numel);
    if (b < e)
      DST_RETURN_IF_ERROR(
          optimizer_->state().Write(0, b - state_range_.offset, e - b, in + (b - d.offset)));
  }
  if (const TensorSlot *slot = fp32_ ? fp32_->Find(id) : nullptr)
    FromHost(in, d.numel, fp32_->values(*slot));
  if (params_) return params_->Write(id, in);
  FromHost(in, d.numel, model_->params().values() + d.offset);
  return Status::Ok();
}

Status DataParallel::ReadGrad(int id, float *out) const {
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  if (stage_ >= 1 && !grads_gathered_ && (stage_ >= 2 || Wide()))
    return StateError("get_grad: at ZeRO stage " + std::to_string(stage_) +
                      " each rank keeps only its shard of the reduced gradients; the full "
                      "gradient is gathered by forward_backward and kept until the next "
                      "train_batch or forward_backward. Call dst_engine_forward_backward first");
  if (const TensorSlot *slot = fp32_ ? fp32_->Find(id) : nullptr) {  // whole, fp32, summed
    const float f = float(GradFactor());
    ToHost(fp32_->grads(*slot), d.numel, out);
    for (int64_t i = 0; i < d.numel; ++i) out[i] *= f;
    return Status::Ok();
  }
  const void *full =
      stage_ >= 2 ? gathered_grads_.at(0) : const_cast<DataParallel *>(this)->FullGrads();
  ops_.WidenToHost(storage_,
                   static_cast<const uint8_t *>(full) + size_t(d.offset) * ElementBytes(storage_),
                   out, d.numel);
  if (Wide()) {
    const float f = float(GradFactor());
    for (int64_t i = 0; i < d.numel; ++i) out[i] *= f;
  }
  return Status::Ok();
}

ShardInfo DataParallel::HeldParams() const {
  if (MastersAreParams()) return state_range_;
  if (params_) return my_shard();
  return ShardInfo{0, layout_.padded};
}

float *DataParallel::HostParams() {
  if (host_params_.size() == 0)
    host_params_ = Buffer<float>(tracker_, MemoryCategory::kOffload, size_t(layout_.padded));
  const ShardInfo held = HeldParams();
  if (MastersAreParams())
    (void)optimizer_->state().Read(0, 0, held.size, host_params_.data());  // resident: cannot fail
  else
    ToHost(params_ ? params_->shard_f32() : model_->params().values(), held.size,
           host_params_.data());
  return host_params_.data();
}

float *DataParallel::FullParams() {
  if (!placement_.on_host()) {  // as on the host: all of them, held in memory
    if (MastersAreParams() && std::string_view(optimizer_->state().kind()) != "resident")
      return nullptr;
    return HeldParams().size == layout_.padded ? HostParams() : nullptr;
  }
  if (Wide() || ParamsOffloaded())  // the master weights, when they cover everything
    return state_range_.size == layout_.padded
               ? const_cast<float *>(optimizer_->state().Resident(0))
               : nullptr;
  if (!params_) return model_->params().values();
  return dp_->size() == 1 ? params_->shard_f32() : nullptr;
}

float *DataParallel::LocalParams(ShardInfo *range) {
  if (!placement_.on_host()) {
    *range = HeldParams();
    return HostParams();
  }
  if (Wide() || ParamsOffloaded()) {
    *range = state_range_;
    return const_cast<float *>(optimizer_->state().Resident(0));
  }
  if (params_) {
    *range = my_shard();
    return params_->shard_f32();
  }
  *range = ShardInfo{0, layout_.padded};
  return model_->params().values();
}

Status DataParallel::ParamsChanged() {
  if (onebit_) onebit_->ResetErrors();  // a load: the error feedback starts afresh
  if (!placement_.on_host() && host_params_.size() > 0) {  // a load wrote the host copy
    const ShardInfo held = HeldParams();
    if (MastersAreParams())
      DST_RETURN_IF_ERROR(optimizer_->state().Write(0, 0, held.size, host_params_.data()));
    else
      FromHost(host_params_.data(), held.size,
               params_ ? params_->shard_f32() : model_->params().values());
  }
  if (MastersAreParams()) return ParamsFromMasters();  // the masters were loaded
  if (mirror_)  // the parameters were loaded: their mirror follows
    DST_RETURN_IF_ERROR(ForEachStatePiece(/*modified=*/true, [&](const StatePiece &piece) {
      ParamsToMasters(piece);
      return Status::Ok();
    }));
  return params_ ? params_->ShardChanged() : Status::Ok();
}

Status DataParallel::ParamsFromMasters() {
  if (params_) DST_RETURN_IF_ERROR(params_->BeginShardWrite());
  Status st = ForEachStatePiece(/*modified=*/false, [&](const StatePiece &piece) {
    return StateToParams(piece.begin, piece.count, piece.tensors[0]);
  });
  if (st.ok() && params_) st = params_->EndShardWrite(optimizer_->steps_taken());
  if (!st.ok() && params_) params_->AbortShardWrite();
  DST_RETURN_IF_ERROR(st);
  return ShareParams();
}

}  // namespace dst
