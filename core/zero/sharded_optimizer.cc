#include "core/zero/sharded_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace dst {

namespace {

constexpr int64_t kChunk = 65536;  // elements widened at a time in a 16-bit step on the host

// Elements [c, c + n) of a piece.
StatePiece PartOf(const StatePiece &piece, int64_t c, int64_t n) {
  StatePiece part = piece;
  part.begin = piece.begin + c;
  part.count = n;
  for (float *&t : part.tensors)
    if (t) t += c;
  return part;
}

// The tensors [offset, offset + numel) taken together.
TensorSpan OneSpan(const std::vector<TensorSpan> &spans) {
  int64_t end = 0;
  for (const TensorSpan &s : spans) end = std::max(end, s.offset + s.numel);
  return {0, end};
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(const Config &config, const ZeroShards *shards,
                                   const StateStoreMaker &make_store, ParamSwapOptions param_swap)
    : shards_(*shards),
      ops_(shards->placement),
      param_swap_(std::move(param_swap)),
      chunk_elements_(kChunk) {
  const StepPlacement &placement = shards_.placement;
  const bool wide = shards_.wide();
  const int stage = shards_.stage;
  MemoryTracker *tracker = shards_.tracker;
  if (stage < 3) param_swap_.path.clear();
  // On a device, offload_optimizer (cpu, or nvme through its store) keeps the
  // optimizer's state and the master weights on the host (ZeRO-Offload).
  host_state_ = !placement.on_host() &&
                (make_store != nullptr || config.zero.offload_optimizer_device == "cpu");
  // offload_param on a device: the parameter shard in host memory (and NVMe),
  // written by the optimizer there (the config gate pairs it with host_state_).
  params_on_host_ =
      !placement.on_host() && stage >= 3 && config.zero.offload_param_device != "none";
  mirror_ = (make_store != nullptr || ParamsOffloaded() || host_state_) && !wide;
  optimizer_ =
      std::make_unique<Optimizer>(SteppedOptimizer(config), range().size, tracker, wide || mirror_,
                                  make_store, host_state_ ? StepPlacement{} : placement);
  if (optimizer_->two_pass()) SetTensorParts();

  // The parameters the step writes: stage 3's shard (small tensors whole on
  // every rank), or under 16 bits the working copies of every tensor (a
  // partition over a group of one).
  ParamStore<float> &store = shards_.model->params();
  const uint64_t seed = shards_.model->spec().seed;
  if (stage >= 3)
    params_ = std::make_unique<ParameterPartition>(
        shards_.plan, shards_.layout, shards_.dp, &store, tracker, seed,
        config.zero.stage3_prefetch_bucket_size, shards_.storage,
        param_swap_.path.empty() ? -1 : param_swap_.max_in_cpu, placement, params_on_host_);
  else if (wide)
    params_ = std::make_unique<ParameterPartition>(
        shards_.plan, ShardLayout(shards_.layout.padded, 1), shards_.local, &store, tracker, seed,
        0, shards_.storage, -1, placement);
  // The layers read their GEMM weights' bf16 copies where they multiply in bf16.
  if (params_ && shards_.model->Bf16Operands()) params_->SkipWideningBf16GemmWeights();

  // 16 bits: the gradients widened a chunk at a time where they live; with
  // the state on the host, master weights go up through it.
  if (!placement.on_host())  // no bigger than the state range
    chunk_elements_ = std::min(int64_t(placement.memory->chunk_bytes() / sizeof(float)),
                               std::max<int64_t>(1, range().size));
  if (wide || host_state_)
    chunk_ = Buffer<float>(tracker, MemoryCategory::kCommunication, size_t(chunk_elements_),
                           placement.memory);
  if (host_state_) {
    const bool pinned = config.zero.offload_optimizer_pin_memory;
    const size_t chunk_bytes = size_t(chunk_elements_) * sizeof(float);
    for (int b = 0; b < 2; ++b) {
      down_[b] = HostStaging(placement.memory, chunk_bytes, pinned, tracker);
      if (wide) up_[b] = HostStaging(placement.memory, chunk_bytes / 2, pinned, tracker);
    }
    // The sums are final after a reduction (ZeRO 2/3: to the owners; 0/1:
    // the buckets', with more than one rank). Zeroed: the padding is never
    // copied down.
    if (stage >= 2 || shards_.dp->size() > 1) {
      const size_t bytes = size_t(range().size) * ElementBytes(shards_.storage);
      host_grads_ =
          HostStaging(placement.memory, bytes, pinned, tracker, MemoryCategory::kGradients);
      std::memset(host_grads_.as<void>(), 0, bytes);
    }
  }
  const OptimizerType type = config.optimizer.type;
  const bool one_bit = type == OptimizerType::kOneBitAdam || type == OptimizerType::kZeroOneAdam ||
                       type == OptimizerType::kOneBitLamb;
  if (one_bit && stage == 0 && shards_.dp->size() > 1) {
    std::vector<TensorSpan> spans;
    for (const ParamDecl &d : shards_.model->params().decls()) spans.push_back({d.offset, d.numel});
    // 1-bit LAMB exchanges every tensor's (rescaled) momentum as one.
    if (type == OptimizerType::kOneBitLamb) spans = {OneSpan(spans)};
    onebit_ = std::make_unique<OneBitAllReduce>(shards_.dp, std::move(spans), shards_.tracker);
  }
  const GradientCompressionConfig &gc = config.gradient_compression;
  if (gc.enabled && gc.target == "update" && stage == 0 && shards_.dp->size() > 1)
    updates_ = std::make_unique<UpdateExchange>(
        CodecOptionsOf(gc, config.optimizer), shards_.dp, range().size,
        std::max<int64_t>(1, config.zero.reduce_bucket_size), tracker);
}

void ShardedOptimizer::Attach(GradientSync *grads) {
  grads_ = grads;
  if (!host_grads_.empty()) grads->SetObserver(this);
}

// Waits for the gathers in flight before the buffers they use go away, and
// for the backward's copies down (a skipped step never waited for them).
ShardedOptimizer::~ShardedOptimizer() {
  params_.reset();
  if (!host_grads_.empty()) shards_.placement.memory->WaitCopy(grads_down_);
}

bool ShardedOptimizer::BeginGradients() {
  clip_coef_ = 1;
  grads_on_host_ = !host_grads_.empty();
  host_scalings_.clear();
  const int64_t next = optimizer_->steps_taken() + 1;
  local_grads_ =
      (onebit_ && !optimizer_->ReducesGradients(next)) || (updates_ && updates_->Compresses(next));
  if (onebit_ && optimizer_->RestartsExchangeErrors(next)) onebit_->ResetErrors();
  return local_grads_;
}

double ShardedOptimizer::GradFactor() const {
  const double ranks = local_grads_ ? 1.0 : double(shards_.dp->size());
  return shards_.wide() ? 1.0 / (loss_scale_ * ranks * shards_.pre_scale) : 1.0;
}

// Where the norm is computed, the clipping is applied: fp32 gradients scaled
// in place (and the scaling replayed on their host copy), 16-bit ones by the
// coefficient the step widens them with.
Result<double> ShardedOptimizer::ClipGradients(double max_norm, const std::vector<int> &excluded,
                                               const NormReducer &over_groups) {
  const double f = GradFactor();
  const StorageType storage = shards_.storage;
  const uint8_t *grads = static_cast<const uint8_t *>(grads_->StateGrads());
  double squared = ops_.SumOfSquares(storage, grads, range().size);
  for (int id : excluded) {
    const ShardInfo part = shards_.StatePartOf(id);
    squared -= ops_.SumOfSquares(
        storage, grads + size_t(part.offset - range().offset) * ElementBytes(storage), part.size);
  }
  DST_RETURN_IF_ERROR(step().TakeError());
  if (fp32()) squared += fp32()->GradSquares(range(), excluded);  // zero in the 16-bit buffer
  squared *= f * f;
  if (shards_.stage >= 1 || local_grads_) {  // summed over the shards in fp32
    Result<double> summed = SquaresOverRanks(squared);
    if (!summed.ok()) return summed.status();
    squared = summed.value();
  }
  if (over_groups) {
    Result<double> total = over_groups(squared);
    if (!total.ok()) return total.status();
    squared = total.value();
  }
  const double norm = std::sqrt(squared);
  if (!std::isfinite(norm) || max_norm <= 0) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return norm;
  const float k = float(coef);
  if (shards_.wide()) {  // applied as the step widens the gradients
    clip_coef_ *= double(k);
    return norm;
  }
  BeforeGradsWrite();
  step().ScaleRange(k, range().size, static_cast<float *>(grads_->StateGrads()));
  if (grads_on_host_) host_scalings_.push_back(k);
  return norm;
}

void ShardedOptimizer::GradsScaled(float k) {
  if (grads_on_host_) host_scalings_.push_back(k);
}

Status ShardedOptimizer::WriteMasters(int id, const float *in) {
  const ShardInfo part = shards_.StatePartOf(id);
  if (part.size == 0) return Status::Ok();
  // 0/1 Adam's local steps since the last synchronisation were taken from
  // the weights being replaced: kept, the synchronisation would take each
  // rank's own back off the new weights and part the ranks for good.
  if (optimizer_->config().type == OptimizerType::kZeroOneAdam && optimizer_->accumulator())
    std::fill_n(optimizer_->accumulator() + (part.offset - range().offset), part.size, 0.0f);
  if (!optimizer_->master_weights()) return Status::Ok();
  return optimizer_->state().Write(0, part.offset - range().offset, part.size,
                                   in + (part.offset - shards_.decl(id).offset));
}

void ShardedOptimizer::AppendOwnState(OwnState *out) {
  if (onebit_) onebit_->AppendOwnState(out);
  Optimizer &opt = *optimizer_;
  if (opt.config().type == OptimizerType::kZeroOneAdam && opt.accumulator()) {
    out->buffers.push_back({"zero_one.accumulator", opt.accumulator(), range().size});
    out->scalars.push_back({"zero_one.lr_sum", opt.lr_sum()});
    if (shards_.dp->size() > 1)  // local steps part the ranks' momentum
      for (const OptimizerStateBuffer &b : opt.StateBuffers())
        if (b.name == "exp_avg")
          out->buffers.push_back({"zero_one.exp_avg", b.data, b.size, /*optional=*/true,
                                  /*save=*/opt.ranks_parted()});
  }
  if (!updates_) return;
  updates_->AppendOwnState(out);
  for (const OptimizerStateBuffer &b : opt.StateBuffers())
    out->buffers.push_back({"update_compression." + b.name, b.data, b.size});
}

void ShardedOptimizer::ResetOwnState() {
  if (onebit_) onebit_->ResetErrors();
  if (updates_) updates_->ResetOwnState();
  if (optimizer_->config().type == OptimizerType::kZeroOneAdam && optimizer_->accumulator()) {
    std::fill_n(optimizer_->accumulator(), range().size, 0.0f);
    *optimizer_->lr_sum() = 0;
  }
}

Status ShardedOptimizer::WeightsLoaded() {
  if (MastersAreParams()) return ParamsFromMasters();
  if (mirror_)  // the parameters were loaded: their mirror follows
    DST_RETURN_IF_ERROR(ForEachStatePiece(/*modified=*/true, [&](const StatePiece &piece) {
      ParamsToMasters(piece);
      return Status::Ok();
    }));
  return params_ ? params_->ShardChanged() : Status::Ok();
}

Status ShardedOptimizer::Start() {
  DST_RETURN_IF_ERROR(optimizer_->state().Open());
  DST_RETURN_IF_ERROR(StartParamSwap());
  if (!optimizer_->state().ResumableSteps().empty())
    return Status::Ok();  // the engine: ResumeAt or StartFresh
  return StartFresh();
}

Result<std::string> ShardedOptimizer::ResumeAt(int64_t step) {
  Result<std::string> note = optimizer_->state().ResumeAt(step);
  if (!note.ok()) return note.status();
  optimizer_->set_steps_taken(step);
  DST_RETURN_IF_ERROR(ParamsFromMasters());
  return note;
}

Status ShardedOptimizer::StartFresh() {
  if (!optimizer_->master_weights()) return Status::Ok();
  // 16 bits: the master weights are the fp32 initialisation of the state
  // range (a pure function of the element, as the 16-bit parameters are its
  // rounding); fp32: a copy of the parameters.
  ParamStore<float> &store = shards_.model->params();
  const uint64_t seed = shards_.model->spec().seed;
  return ForEachStatePiece(/*modified=*/true, [&](const StatePiece &piece) {
    const int64_t begin = range().offset + piece.begin;
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

Status ShardedOptimizer::StartParamSwap() {
  if (!ParamsOffloaded() || params_->swapped_elements() == 0) return Status::Ok();
  const int64_t share = params_->largest_swapped_share();
  if (share > param_swap_.buffer_size)
    return ConfigError("zero_optimization.offload_param.buffer_size is " +
                       std::to_string(param_swap_.buffer_size) +
                       " elements, but a layer's share of this rank's swapped parameters is " +
                       std::to_string(share) + "; raise buffer_size to at least " +
                       std::to_string(share));
  ParamSwapOptions options = param_swap_;
  const int64_t bytes = int64_t(ElementBytes(shards_.storage));
  options.bytes = params_->swapped_elements() * bytes;
  options.window_bytes = share * bytes;
  Result<std::unique_ptr<ParamSwap>> swap = ParamSwap::Create(options, shards_.tracker);
  if (!swap.ok()) return swap.status();
  return params_->AttachSwap(std::move(swap).value());
}

Status ShardedOptimizer::ForEachStatePiece(bool modified,
                                           const std::function<Status(const StatePiece &)> &fn) {
  StateStore &state = optimizer_->state();
  DST_RETURN_IF_ERROR(state.BeginPass(optimizer_->steps_taken()));
  const int64_t step = state.piece_elements();
  for (int64_t c = 0; c < range().size; c += step) {
    StatePiece piece;
    Status st = optimizer_->AcquireState(c, std::min(step, range().size - c), &piece);
    if (st.ok()) st = fn(piece);
    if (st.ok()) st = state.Release(piece, modified);
    if (!st.ok()) {
      state.AbortPass();
      return st;
    }
  }
  return state.EndPass();
}

// The shards' squares summed in fp32; each rank's own gradients (1-bit
// Adam's compressed steps) averaged instead, so that every rank clips by the
// same coefficient and skips an overflowed step with the others.
Result<double> ShardedOptimizer::SquaresOverRanks(double local) {
  if (shards_.dp->size() == 1) return local;
  float v = float(local);
  DST_RETURN_IF_ERROR(shards_.dp->AllReduceSum(&v, 1)->Wait());
  return local_grads_ ? double(v) / double(shards_.dp->size()) : double(v);
}

Status ShardedOptimizer::MasterToParams(int64_t begin, int64_t count, const float *master) {
  if (fp32()) fp32()->TakeValues(range().offset + begin, count, master);
  const int64_t at = ParamIndex(begin);
  if (params_->Resident(at, count)) {
    ops_.Narrow(shards_.storage, master, HalfParams(begin), count);
    return Status::Ok();
  }
  return NarrowIntoShard(at, master, count);
}

Status ShardedOptimizer::NarrowIntoShard(int64_t at, const float *master, int64_t count) {
  uint16_t half[kChunk];
  for (int64_t c = 0; c < count; c += kChunk) {
    const int64_t n = std::min(kChunk, count - c);
    Narrow(shards_.storage, master + c, half, n);
    DST_RETURN_IF_ERROR(params_->WriteShard(at + c, half, n, /*from_host=*/true));
  }
  return Status::Ok();
}

Status ShardedOptimizer::ShareParams() {
  if ((shards_.stage == 1 || shards_.stage == 2) && shards_.dp->size() > 1) {
    void *all =
        shards_.wide() ? params_->shard() : static_cast<void *>(shards_.model->params().values());
    DST_RETURN_IF_ERROR(
        AllGather(*shards_.dp, shards_.storage, all, shards_.layout.shard_size())->Wait());
  }
  if (fp32() && shards_.stage >= 1) DST_RETURN_IF_ERROR(fp32()->ShareValues(*shards_.dp, range()));
  return params_ ? params_->ShardChanged() : Status::Ok();
}

Status ShardedOptimizer::Step(double lr, const TensorReducers &reducers) {
  if (params_) DST_RETURN_IF_ERROR(params_->Drain());
  optimizer_->BeginStep();
  int64_t touched = 0;
  if (Status frozen = optimizer_->FreezeScalingsIfDue(reducers); !frozen.ok())
    return RollBack(touched, std::move(frozen));
  const bool exchange = updates_ && local_grads_;
  float *weights = exchange ? SteppedWeights() : nullptr;
  if (exchange && weights == nullptr)
    return RollBack(touched, InternalError("the compressed update needs the weights in memory"));
  if (exchange) updates_->Begin(weights);
  const auto update = [&](const StatePiece &piece) { return UpdatePiece(piece, lr); };
  Status st =
      optimizer_->two_pass() ? TwoPassStep(lr, reducers, &touched) : UpdatePieces(&touched, update);
  clip_coef_ = 1;
  if (!st.ok()) return RollBack(touched, std::move(st));
  if (exchange) return ExchangeUpdate(weights);
  return ShareParams();
}

float *ShardedOptimizer::SteppedWeights() {
  if (!optimizer_->master_weights()) return StateParams();
  return const_cast<float *>(optimizer_->state().Resident(0));
}

// This rank's step (from its own gradients) replaced by every rank's
// compressed mean (or, should the exchange fail, undone); 16-bit parameters
// rounded again from the masters either way.
Status ShardedOptimizer::ExchangeUpdate(float *weights) {
  Status st = updates_->Finish(weights);
  Status shared = optimizer_->master_weights() ? ParamsFromMasters() : ShareParams();
  if (!st.ok())
    return st.context("optimizer step " + std::to_string(optimizer_->steps_taken()) +
                      ": the compressed update was not exchanged; the weights are as before "
                      "the step but the optimizer's moments moved on: load the last checkpoint");
  return shared;
}

void ShardedOptimizer::SetTensorParts() {
  const std::vector<ParamDecl> &decls = shards_.model->params().decls();
  std::vector<TensorPart> parts;
  for (size_t id = 0; id < decls.size(); ++id) {
    const ShardInfo part = shards_.StatePartOf(int(id));
    if (part.size > 0) parts.push_back({int(id), part.offset - range().offset, part.size});
  }
  optimizer_->SetTensorParts(std::move(parts), int(decls.size()));
}

// Lamb: the moments pass (the gradients' whole path, the weights as they
// were), each tensor's sums added over the shards (stages 1-3) and the
// reducer's group, then the apply pass from the state alone.
Status ShardedOptimizer::TwoPassStep(double lr, const TensorReducers &reducers, int64_t *touched) {
  int64_t moments = 0;  // the first pass moves no weight
  DST_RETURN_IF_ERROR(
      UpdatePieces(&moments, [&](const StatePiece &piece) { return UpdatePiece(piece, lr); }));
  if (optimizer_->exchange() == Optimizer::Exchange::kAccumulator) {
    if (onebit_) DST_RETURN_IF_ERROR(onebit_->Run(optimizer_->accumulator()));
  } else if (optimizer_->exchange() == Optimizer::Exchange::kMomentum) {
    if (onebit_) DST_RETURN_IF_ERROR(ExchangeMomentum());
  } else {
    std::vector<double> &sums = optimizer_->trust_sums();
    if (shards_.stage >= 1 && shards_.dp->size() > 1) {
      std::vector<float> wire(sums.begin(), sums.end());
      DST_RETURN_IF_ERROR(shards_.dp->AllReduceSum(wire.data(), int64_t(wire.size()))->Wait());
      std::copy(wire.begin(), wire.end(), sums.begin());
    }
    if (reducers.sum_over_slices) DST_RETURN_IF_ERROR(reducers.sum_over_slices(&sums, 2));
  }
  optimizer_->BeginApplyPass();
  if (optimizer_->factor_pass()) {  // 1-bit LAMB: each tensor's factor inputs first
    int64_t read = 0;
    DST_RETURN_IF_ERROR(
        UpdatePieces(&read, [&](const StatePiece &piece) { return FactorPiece(piece, lr); }));
    DST_RETURN_IF_ERROR(optimizer_->BeginFinishPass(reducers));
  }
  return UpdatePieces(touched, [&](const StatePiece &piece) { return ApplyPiece(piece, lr); });
}

// 1-bit Adam: every rank's momentum (from its own gradients) replaced by
// their compressed mean; the state is in memory at stage 0.
Status ShardedOptimizer::ExchangeMomentum() {
  const float *exp_avg = optimizer_->state().Resident(optimizer_->first_state_tensor());
  if (exp_avg == nullptr) return InternalError("1-bit Adam's momentum is not in host memory");
  return onebit_->Run(const_cast<float *>(exp_avg));
}

// 1-bit LAMB's factor pass reads the weights the apply pass will move.
Status ShardedOptimizer::FactorPiece(const StatePiece &piece, double lr) {
  const bool in_place = !shards_.wide() && !mirror_ && !host_state_;
  optimizer_->Update(piece, in_place ? StateParams() + piece.begin : nullptr, nullptr, lr);
  return step().TakeError();
}

Status ShardedOptimizer::ApplyPiece(const StatePiece &piece, double lr) {
  if (!shards_.wide() && !mirror_ && !host_state_) {  // fp32 weights updated in place
    optimizer_->Update(piece, StateParams() + piece.begin, nullptr, lr);
    return step().TakeError();
  }
  optimizer_->Update(piece, nullptr, nullptr, lr);  // the master weights
  DST_RETURN_IF_ERROR(step().TakeError());
  return StateToParams(piece.begin, piece.count, piece.tensors[0]);
}

Status ShardedOptimizer::UpdatePieces(int64_t *touched,
                                      const std::function<Status(const StatePiece &)> &update) {
  StateStore &state = optimizer_->state();
  DST_RETURN_IF_ERROR(state.BeginPass(optimizer_->steps_taken()));
  if (params_) DST_RETURN_IF_ERROR(params_->BeginShardWrite());
  if (grads_on_host_) shards_.placement.memory->WaitCopy(grads_down_);  // the backward's copies
  const int64_t step = state.piece_elements();
  for (int64_t c = 0; c < range().size; c += step) {
    StatePiece piece;
    DST_RETURN_IF_ERROR(optimizer_->AcquireState(c, std::min(step, range().size - c), &piece));
    *touched = piece.begin + piece.count;
    DST_RETURN_IF_ERROR(update(piece));
    DST_RETURN_IF_ERROR(state.Release(piece, true));
  }
  // The swapped parameters commit first: should the state's commit fail,
  // RollBack rewrites them from the masters it committed last.
  if (params_) DST_RETURN_IF_ERROR(params_->EndShardWrite(optimizer_->steps_taken()));
  return state.EndPass();
}

void ShardedOptimizer::ParamsToMasters(const StatePiece &piece) {
  if (host_state_)
    ops_.Download(piece.tensors[0], StateParams() + piece.begin,
                  size_t(piece.count) * sizeof(float));
  else
    step().CopyRange(StateParams() + piece.begin, piece.count, piece.tensors[0]);
}

Status ShardedOptimizer::StateToParams(int64_t begin, int64_t count, const float *master) {
  return host_state_ ? HostMastersToParams(begin, count, master)
                     : MastersToParams(begin, count, master);
}

Status ShardedOptimizer::WriteHalfParams(int64_t begin, int64_t n, const uint16_t *host) {
  const int64_t at = ParamIndex(begin);
  if (params_->Resident(at, n)) {
    ops_.Upload(HalfParams(begin), host, size_t(n) * sizeof(uint16_t));
    return Status::Ok();
  }
  return params_->WriteShard(at, host, n, /*from_host=*/true);
}

Status ShardedOptimizer::UpdatePiece(const StatePiece &piece, double lr) {
  if (!shards_.wide()) {  // fp32: the parameters updated in place, or their mirror and a copy
    const float *grads = static_cast<const float *>(grads_->StateGrads()) + piece.begin;
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
  const uint16_t *grads = static_cast<const uint16_t *>(grads_->StateGrads()) + piece.begin;
  const bool fused = optimizer_->fuses();
  float *chunk = chunk_.data();
  uint16_t half[kChunk];  // the 16-bit copy of a chunk whose parameters are swapped (host)
  for (int64_t c = 0; c < piece.count; c += chunk_elements_) {
    const int64_t n = std::min(chunk_elements_, piece.count - c);
    ops_.Widen(shards_.storage, grads + c, chunk, n);
    if (fp32()) fp32()->OverlayGrads(range().offset + piece.begin + c, n, chunk);
    const StatePiece part = PartOf(piece, c, n);
    if (fused) {
      const int64_t at = ParamIndex(part.begin);
      uint16_t *out = params_->Resident(at, n) ? HalfParams(part.begin) : half;
      if (out == half && n > kChunk)  // swapped parameters are a host placement's
        return InternalError("a 16-bit update chunk of swapped parameters exceeds its buffer");
      optimizer_->Update(part, nullptr, chunk, lr, {factor, out, HalfOf(shards_.storage)});
      if (fp32()) fp32()->TakeValues(range().offset + part.begin, n, part.tensors[0]);
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
Status ShardedOptimizer::StreamGradsDown(const StatePiece &piece, const void *grads, size_t bytes,
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
  MemoryResource &device = *shards_.placement.memory;
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

Status ShardedOptimizer::SendHalfParams(int64_t begin, int64_t n, const uint16_t *half,
                                        uint64_t *sent) {
  const int64_t at = ParamIndex(begin);
  if (!params_->Resident(at, n)) return WriteHalfParams(begin, n, half);
  *sent =
      shards_.placement.memory->UploadAsync(HalfParams(begin), half, size_t(n) * sizeof(uint16_t));
  return Status::Ok();
}

// 16 bits with the state on the host (ZeRO-Offload): each chunk's 16-bit
// gradients down (the next chunk's copy running meanwhile), widened,
// CPU-Adam's update with the 16-bit copy written in the same pass into a
// staging buffer, that copy up while the next chunk is updated (2 bytes a
// parameter each way).
Status ShardedOptimizer::UpdateHostPiece(const StatePiece &piece, double lr) {
  const float factor = float(clip_coef_ * GradFactor());
  const uint16_t *grads = static_cast<const uint16_t *>(grads_->StateGrads()) + piece.begin;
  std::vector<float> chunk(static_cast<size_t>(chunk_elements_));
  uint64_t sent[2] = {0, 0};
  const Status st = StreamGradsDown(
      piece, grads, sizeof(uint16_t), [&](const StatePiece &part, const void *down, int b) {
        const int64_t n = part.count;
        Widen(shards_.storage, static_cast<const uint16_t *>(down), chunk.data(), n);
        const int64_t flat = range().offset + part.begin;
        if (fp32()) fp32()->OverlayGrads(flat, n, chunk.data(), /*host_dst=*/true);
        uint16_t *half = up_[b].as<uint16_t>();
        shards_.placement.memory->WaitCopy(sent[b]);  // its copy two chunks back has left
        if (optimizer_->fuses()) {
          optimizer_->Update(part, nullptr, chunk.data(), lr,
                             {factor, half, HalfOf(shards_.storage)});
        } else {
          for (int64_t i = 0; i < n; ++i) chunk[size_t(i)] *= factor;
          optimizer_->Update(part, nullptr, chunk.data(), lr);
          Narrow(shards_.storage, part.tensors[0], half, n);
        }
        if (fp32()) fp32()->TakeValues(flat, n, part.tensors[0], /*host_src=*/true);
        return SendHalfParams(part.begin, n, half, &sent[b]);
      });
  shards_.placement.memory->WaitCopy(std::max(sent[0], sent[1]));  // the last ones up
  return st;
}

uint16_t *ShardedOptimizer::HalfParams(int64_t begin) {
  // The 16-bit parameters cover the state range: all of them below stage 3
  // (stage 0: the range is everything), this rank's shard at 3.
  return static_cast<uint16_t *>(params_->shard()) + ParamIndex(begin);
}

Status ShardedOptimizer::MastersToParams(int64_t begin, int64_t count, const float *master) {
  if (shards_.wide()) return MasterToParams(begin, count, master);
  if (params_) return params_->WriteShard(begin, master, count);  // stage 3: the shard
  step().CopyRange(master, count, StateParams() + begin);
  return Status::Ok();
}

Status ShardedOptimizer::HostMastersToParams(int64_t begin, int64_t count, const float *master) {
  if (ops_.on_host()) return MastersToParams(begin, count, master);
  if (params_on_host_) {  // host to host: the shard is in host memory
    if (!shards_.wide())
      return params_->WriteShard(ParamIndex(begin), master, count, /*from_host=*/true);
    if (fp32()) fp32()->TakeValues(range().offset + begin, count, master, /*host_src=*/true);
    return NarrowIntoShard(ParamIndex(begin), master, count);
  }
  for (int64_t c = 0; c < count; c += chunk_elements_) {  // through the device's chunk buffer
    const int64_t n = std::min(chunk_elements_, count - c);
    ops_.Upload(chunk_.data(), master + c, size_t(n) * sizeof(float));
    DST_RETURN_IF_ERROR(MastersToParams(begin + c, n, chunk_.data()));
  }
  return Status::Ok();
}

Status ShardedOptimizer::RollBack(int64_t touched, Status failure) {
  StateStore &state = optimizer_->state();
  state.AbortPass();
  optimizer_->set_steps_taken(optimizer_->steps_taken() - 1);
  // Swapped parameters are rewritten whole, in one pass.
  const bool swapped = params_ && params_->offloaded();
  if (swapped) params_->AbortShardWrite();
  if (swapped) touched = range().size;
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

Status ShardedOptimizer::ParamsFromMasters() {
  if (params_) DST_RETURN_IF_ERROR(params_->BeginShardWrite());
  Status st = ForEachStatePiece(/*modified=*/false, [&](const StatePiece &piece) {
    return StateToParams(piece.begin, piece.count, piece.tensors[0]);
  });
  if (st.ok() && params_) st = params_->EndShardWrite(optimizer_->steps_taken());
  if (!st.ok() && params_) params_->AbortShardWrite();
  DST_RETURN_IF_ERROR(st);
  return ShareParams();
}

float *ShardedOptimizer::StateParams() {
  if (params_) return params_->shard_f32();  // stage 3: the shard is the state range
  return shards_.model->params().values() + range().offset;
}

// The backward's copies down read the device's gradients on the copy
// stream: an in-place write queued after them waits for them there.
void ShardedOptimizer::BeforeGradsWrite() {
  if (!host_grads_.empty()) shards_.placement.memory->OrderAfterCopies();
}

void ShardedOptimizer::GradsFinal(int64_t begin, int64_t count) {
  const size_t bytes = ElementBytes(shards_.storage), at = size_t(begin - range().offset) * bytes;
  grads_down_ = shards_.placement.memory->DownloadAsync(
      host_grads_.as<uint8_t>() + at, static_cast<const uint8_t *>(grads_->StateGrads()) + at,
      size_t(count) * bytes);
}

}  // namespace dst
