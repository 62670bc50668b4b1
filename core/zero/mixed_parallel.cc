#include "core/zero/mixed_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace dst {

namespace {

constexpr int64_t kChunk = 4096;  // elements widened at a time in the step

void RoundFp16(float *x, int64_t n) {
  RoundInPlace(Half::kFp16, x, n);
}
void RoundBf16(float *x, int64_t n) {
  RoundInPlace(Half::kBf16, x, n);
}

Status WaitAll(std::vector<std::unique_ptr<Work>> *works) {
  Status first;
  for (auto &work : *works) {
    Status st = work->Wait();
    if (!st.ok() && first.ok()) first = std::move(st);
  }
  works->clear();
  return first;
}

}  // namespace

ParamStoreOptions StoreOptionsForMixedPrecision(int64_t dp_size) {
  ParamStoreOptions options;
  options.pad_multiple = dp_size;
  options.full_values = false;
  options.full_grads = false;
  return options;
}

MixedPrecisionParallel::MixedPrecisionParallel(const Config &config, Model<float> *model,
                                               Communicator *dp, MemoryTracker *tracker)
    : stage_(config.zero.stage),
      half_(config.precision() == DType::kFloat16 ? Half::kFp16 : Half::kBf16),
      reduce_in_half_(config.communication_data_type != DType::kFloat32),
      dp_(dp),
      model_(model),
      tracker_(tracker),
      layout_(model->params().size(), dp->size()),
      bucket_elements_(std::max<int64_t>(1, config.zero.reduce_bucket_size)) {
  const ShardInfo all{0, layout_.padded}, mine = layout_.Shard(dp->rank());
  params_range_ = stage_ >= 3 ? mine : all;
  grads_range_ = stage_ >= 2 ? mine : all;
  state_range_ = stage_ >= 1 ? mine : all;
  optimizer_ = std::make_unique<Optimizer>(config.optimizer, state_range_.size, tracker);
  p16_ = Buffer<uint16_t>(tracker, MemoryCategory::kParameters, size_t(params_range_.size));
  g16_ = Buffer<uint16_t>(tracker, MemoryCategory::kGradients, size_t(grads_range_.size));
  master_ = Buffer<float>(tracker, MemoryCategory::kOptimizerState, size_t(state_range_.size));

  ParamStore<float> &store = model->params();
  int64_t largest = 0;
  for (const LayerParamUse &use : model->layer_params()) {
    layers_.push_back(PackTensors(store.decls(), use.ids));
    largest = std::max(largest, layers_.back().size);
  }
  const auto comm = MemoryCategory::kCommunication;
  work_params_ = Buffer<float>(tracker, comm, size_t(largest));
  work_grads_ = Buffer<float>(tracker, comm, size_t(largest));
  const bool several = dp->size() > 1;
  if (stage_ >= 3 || (stage_ == 2 && several && reduce_in_half_))
    wire16_ = Buffer<uint16_t>(tracker, comm, size_t(largest));
  if (stage_ <= 1 && several && !reduce_in_half_)
    wire32_ = Buffer<float>(tracker, comm, size_t(std::min(bucket_elements_, layout_.padded)));
  // Until its layer runs, every tensor points into the working buffers, so a
  // pass cut short by an error reads only memory this object owns.
  for (const StagingLayout &layer : layers_)
    for (const TensorSlot &slot : layer.slots) {
      store.SetParamPointer(slot.id, work_params_.data() + slot.staged);
      store.SetGradPointer(slot.id, work_grads_.data() + slot.staged);
    }

  // The master weights are the fp32 initialisation of the state range (a
  // pure function of the element, as in the fp32 path); the 16-bit
  // parameters are its rounding.
  const uint64_t seed = model->spec().seed;
  store.InitializeRange(seed, state_range_.offset, state_range_.offset + state_range_.size,
                        master_.data());
  std::vector<float> chunk(static_cast<size_t>(kChunk));
  for (int64_t b = 0; b < params_range_.size; b += kChunk) {
    const int64_t n = std::min(kChunk, params_range_.size - b);
    store.InitializeRange(seed, params_range_.offset + b, params_range_.offset + b + n,
                          chunk.data());
    FromFloat(half_, chunk.data(), p16_.data() + b, n);
  }
}

MixedPrecisionParallel::~MixedPrecisionParallel() = default;

LayerHooks::RoundFn MixedPrecisionParallel::activation_rounding() const {
  return half_ == Half::kFp16 ? &RoundFp16 : &RoundBf16;
}

// ---------------------------------------------------------------- parameters in use

void MixedPrecisionParallel::GatherPieces(int64_t begin, int64_t end, uint16_t *out16,
                                          std::vector<std::unique_ptr<Work>> *works) {
  layout_.ForEachOwner(begin, end, [&](int64_t owner, int64_t b, int64_t e) {
    uint16_t *piece = out16 + (b - begin);
    if (owner == dp_->rank())
      std::memcpy(piece, p16_.data() + (b - params_range_.offset), size_t(e - b) * 2);
    if (dp_->size() > 1) works->push_back(dp_->Broadcast16(piece, e - b, owner));
  });
}

Status MixedPrecisionParallel::Acquire(size_t layer) {
  if (staged_layer_ == int64_t(layer)) return Status::Ok();
  staged_layer_ = -1;
  const StagingLayout &l = layers_[layer];
  if (stage_ < 3) {
    for (const Segment &s : l.segments)
      ToFloat(half_, p16_.data() + s.begin, work_params_.data() + s.staged, s.size());
  } else {
    std::vector<std::unique_ptr<Work>> works;
    for (const Segment &s : l.segments)
      GatherPieces(s.begin, s.end, wire16_.data() + s.staged, &works);
    DST_RETURN_IF_ERROR(WaitAll(&works));
    ToFloat(half_, wire16_.data(), work_params_.data(), l.size);
  }
  ParamStore<float> &store = model_->params();
  for (const TensorSlot &slot : l.slots)
    store.SetParamPointer(slot.id, work_params_.data() + slot.staged);
  staged_layer_ = int64_t(layer);
  return Status::Ok();
}

Status MixedPrecisionParallel::BeforeForward(size_t layer) {
  return Acquire(layer);
}

Status MixedPrecisionParallel::BeforeBackward(size_t layer) {
  DST_RETURN_IF_ERROR(Acquire(layer));
  const StagingLayout &l = layers_[layer];
  std::memset(work_grads_.data(), 0, size_t(l.size) * sizeof(float));
  ParamStore<float> &store = model_->params();
  for (const TensorSlot &slot : l.slots)
    store.SetGradPointer(slot.id, work_grads_.data() + slot.staged);
  return Status::Ok();
}

Status MixedPrecisionParallel::AfterBackward(size_t layer) {
  const StagingLayout &l = layers_[layer];
  if (stage_ >= 2) return ReduceLayerGradients(l);
  for (const Segment &s : l.segments)
    AccumulateInto(half_, work_grads_.data() + s.staged, g16_.data() + s.begin, s.size());
  return Status::Ok();
}

// ---------------------------------------------------------------- reduction

Status MixedPrecisionParallel::ReduceLayerGradients(const StagingLayout &l) {
  const int64_t me = dp_->rank();
  struct Piece {
    int64_t owner, begin, count, staged;
  };
  std::vector<Piece> pieces;
  for (const Segment &s : l.segments)
    layout_.ForEachOwner(s.begin, s.end, [&](int64_t owner, int64_t b, int64_t e) {
      for (int64_t c = b; c < e; c += bucket_elements_)
        pieces.push_back({owner, c, std::min(bucket_elements_, e - c), s.staged + (c - s.begin)});
    });
  const bool wire_half = reduce_in_half_ && dp_->size() > 1;
  if (dp_->size() > 1) {
    if (wire_half) FromFloat(half_, work_grads_.data(), wire16_.data(), l.size);
    std::vector<std::unique_ptr<Work>> works;
    for (const Piece &p : pieces)
      works.push_back(wire_half
                          ? dp_->ReduceSum16(wire16_.data() + p.staged, p.count, p.owner, half_)
                          : dp_->ReduceSum(work_grads_.data() + p.staged, p.count, p.owner));
    DST_RETURN_IF_ERROR(WaitAll(&works));
  }
  for (const Piece &p : pieces) {
    if (p.owner != me) continue;
    uint16_t *shard = g16_.data() + (p.begin - grads_range_.offset);
    if (wire_half)
      Sum16(half_, shard, wire16_.data() + p.staged, p.count);
    else
      AccumulateInto(half_, work_grads_.data() + p.staged, shard, p.count);
  }
  return Status::Ok();
}

Status MixedPrecisionParallel::ReduceRange(int64_t begin, int64_t end, int64_t root) {
  const int64_t n = end - begin;
  uint16_t *grads = g16_.data() + begin;
  if (reduce_in_half_) {
    auto work =
        root < 0 ? dp_->AllReduceSum16(grads, n, half_) : dp_->ReduceSum16(grads, n, root, half_);
    return work->Wait();
  }
  ToFloat(half_, grads, wire32_.data(), n);
  auto work =
      root < 0 ? dp_->AllReduceSum(wire32_.data(), n) : dp_->ReduceSum(wire32_.data(), n, root);
  DST_RETURN_IF_ERROR(work->Wait());
  if (root < 0 || root == dp_->rank()) FromFloat(half_, wire32_.data(), grads, n);
  return Status::Ok();
}

Status MixedPrecisionParallel::ZeroGradients() {
  g16_.zero();
  gathered16_ = Buffer<uint16_t>();
  grads_gathered_ = false;
  clip_coef_ = 1;
  return Status::Ok();
}

Status MixedPrecisionParallel::FinishReduction() {
  if (stage_ >= 2 || dp_->size() == 1) return Status::Ok();  // reduced layer by layer
  for (int64_t owner = 0; owner < (stage_ == 0 ? 1 : dp_->size()); ++owner) {
    const ShardInfo range = stage_ == 0 ? ShardInfo{0, layout_.padded} : layout_.Shard(owner);
    for (int64_t b = range.offset; b < range.offset + range.size; b += bucket_elements_) {
      const int64_t e = std::min(range.offset + range.size, b + bucket_elements_);
      DST_RETURN_IF_ERROR(ReduceRange(b, e, stage_ == 0 ? -1 : owner));
    }
  }
  return Status::Ok();
}

Result<double> MixedPrecisionParallel::GradNorm() {
  const uint16_t *grads = g16_.data() + (state_range_.offset - grads_range_.offset);
  const double u = Unscale();
  double local = SumOfSquares16(half_, grads, state_range_.size) * u * u;
  if (stage_ >= 1 && dp_->size() > 1) {
    float v = float(local);
    DST_RETURN_IF_ERROR(dp_->AllReduceSum(&v, 1)->Wait());
    local = double(v);
  }
  return std::sqrt(local);
}

// ---------------------------------------------------------------- step

void MixedPrecisionParallel::MasterToHalf() {
  FromFloat(half_, master_.data(), p16_.data() + (state_range_.offset - params_range_.offset),
            state_range_.size);
  staged_layer_ = -1;
}

Status MixedPrecisionParallel::ShareHalfParams() {
  if ((stage_ == 1 || stage_ == 2) && dp_->size() > 1)
    return dp_->AllGather16(p16_.data(), layout_.shard_size())->Wait();
  return Status::Ok();
}

Status MixedPrecisionParallel::Step(double lr) {
  optimizer_->BeginStep();
  const float factor = float(clip_coef_ * Unscale());
  const uint16_t *grads = g16_.data() + (state_range_.offset - grads_range_.offset);
  float chunk[kChunk];
  for (int64_t c = 0; c < state_range_.size; c += kChunk) {
    const int64_t n = std::min(kChunk, state_range_.size - c);
    ToFloat(half_, grads + c, chunk, n);
    for (int64_t i = 0; i < n; ++i) chunk[i] *= factor;
    optimizer_->UpdateRange(master_.data() + c, chunk, lr, c, n);
  }
  clip_coef_ = 1;
  MasterToHalf();
  return ShareHalfParams();
}

Status MixedPrecisionParallel::GatherGradients() {
  if (stage_ == 1 && dp_->size() > 1)
    DST_RETURN_IF_ERROR(dp_->AllGather16(g16_.data(), layout_.shard_size())->Wait());
  if (stage_ >= 2) {
    gathered16_ = Buffer<uint16_t>(tracker_, MemoryCategory::kGradients, size_t(layout_.padded));
    std::memcpy(gathered16_.data() + grads_range_.offset, g16_.data(),
                size_t(grads_range_.size) * 2);
    if (dp_->size() > 1)
      DST_RETURN_IF_ERROR(dp_->AllGather16(gathered16_.data(), layout_.shard_size())->Wait());
  }
  grads_gathered_ = true;
  return Status::Ok();
}

// ---------------------------------------------------------------- whole tensors

Status MixedPrecisionParallel::ReadParam(int id, float *out) {
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  if (stage_ < 3) {
    ToFloat(half_, p16_.data() + d.offset, out, d.numel);
    return Status::Ok();
  }
  std::vector<uint16_t> whole(size_t(d.numel));
  std::vector<std::unique_ptr<Work>> works;
  GatherPieces(d.offset, d.offset + d.numel, whole.data(), &works);
  DST_RETURN_IF_ERROR(WaitAll(&works));
  ToFloat(half_, whole.data(), out, d.numel);
  return Status::Ok();
}

Status MixedPrecisionParallel::WriteParam(int id, const float *in) {
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  const auto write = [&](ShardInfo held, auto &&copy) {
    const int64_t b = std::max(held.offset, d.offset);
    const int64_t e = std::min(held.offset + held.size, d.offset + d.numel);
    if (b < e) copy(in + (b - d.offset), b - held.offset, e - b);
  };
  write(state_range_, [&](const float *src, int64_t at, int64_t n) {
    std::memcpy(master_.data() + at, src, size_t(n) * sizeof(float));
  });
  write(params_range_, [&](const float *src, int64_t at, int64_t n) {
    FromFloat(half_, src, p16_.data() + at, n);
  });
  staged_layer_ = -1;
  return Status::Ok();
}

Status MixedPrecisionParallel::ReadGrad(int id, float *out) const {
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  if (stage_ >= 1 && !grads_gathered_)
    return StateError("get_grad: at ZeRO stage " + std::to_string(stage_) +
                      " each rank keeps only its shard of the reduced gradients; the full "
                      "gradient is gathered by forward_backward and kept until the next "
                      "train_batch or forward_backward. Call dst_engine_forward_backward first");
  const uint16_t *full = stage_ >= 2 ? gathered16_.data() : g16_.data();
  ToFloat(half_, full + d.offset, out, d.numel);
  const float u = float(Unscale());
  for (int64_t i = 0; i < d.numel; ++i) out[i] *= u;
  return Status::Ok();
}

float *MixedPrecisionParallel::FullParams() {
  return state_range_.size == layout_.padded ? master_.data() : nullptr;
}

float *MixedPrecisionParallel::LocalParams(ShardInfo *range) {
  *range = state_range_;
  return master_.data();
}

Status MixedPrecisionParallel::ParamsChanged() {
  MasterToHalf();
  return ShareHalfParams();
}

}  // namespace dst
