#include "core/zero/data_parallel.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/zero/partition_policy.h"

namespace dst {

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
    : ops_(placement) {
  ZeroShards &s = shards_;
  s.stage = config.zero.stage;
  s.storage = StorageOf(config.precision());
  s.dp = dp;
  s.model = model;
  s.tracker = tracker;
  s.layout = ShardLayout(model->params().size(), dp->size());
  s.state_range = s.stage == 0 ? ShardInfo{0, s.layout.padded} : s.my_shard();
  s.placement = placement;
  s.pre_scale =
      config.prescale_gradients ? 1.0 / double(dp->size()) : 1.0 / config.gradient_predivide_factor;
  if (s.wide() && s.stage < 3) local_ = MakeSoloCommunicator("local");
  s.local = local_.get();

  // Stage 3 keeps small tensors whole; 16 bits stage every tensor (no
  // persistence: nothing is partitioned) to widen it; fp32 below 3 stages none.
  ParamStore<float> &store = model->params();
  const PartitionPolicy policy = PartitionPolicyFor(model->spec(), store.decls(), config);
  const int64_t persistence = s.stage >= 3 ? policy.persistence_threshold : (s.wide() ? 0 : -1);
  plan_ = BuildPartitionPlan(store.decls(), model->layer_params(), persistence,
                             s.stage >= 3 ? policy.whole_by_type : std::vector<bool>{},
                             s.wide() ? policy.fp32 : std::vector<bool>{});
  s.plan = &plan_;
  if (!plan_.fp32.slots.empty())
    fp32_ = std::make_unique<Fp32Params>(&plan_, &store, tracker, model->spec().seed, placement);
  s.fp32 = fp32_.get();

  optimizer_ =
      std::make_unique<ShardedOptimizer>(config, &shards_, make_store, std::move(param_swap));
  GradSyncOptions sync;
  // 16-bit training reduces in fp32 or its own type (the config gate says so).
  sync.wire = StorageOf(config.communication_data_type);
  if (s.wide() && sync.wire != StorageType::kFp32 && sync.wire != s.storage) sync.wire = s.storage;
  sync.overlap = config.zero.overlap_comm && dp->size() > 1;
  sync.bucket_elements = std::max<int64_t>(1, config.zero.reduce_bucket_size);
  // A pipeline stage's micro-batches run a layer's backward at times spread
  // over the step: ZeRO 2 accumulates them locally and reduces once.
  sync.once_per_step = s.stage == 2 && config.pp_size > 1;
  // target "update": the gradients reduce plainly in the warm-up and stay
  // local after it; the optimizer's update is what is compressed.
  sync.compression =
      config.gradient_compression.enabled && config.gradient_compression.target == "gradient";
  sync.codec = CodecOptionsOf(config.gradient_compression, config.optimizer);
  sync.compression_warmup = config.gradient_compression.warmup_steps;
  sync_ = MakeGradientSync(&shards_, sync);
  optimizer_->Attach(sync_.get());

  if (ParameterPartition *params = optimizer_->param_partition()) {
    gathering_ = std::make_unique<ParamGathering>(params, model->layers().size());
    hooks_.push_back(gathering_.get());
  }
  hooks_.push_back(sync_.get());
}

// The reductions in flight finish before the partitions they use go away.
DataParallel::~DataParallel() {
  sync_.reset();
  optimizer_.reset();
}

Status DataParallel::ZeroGradients() {
  const bool local = optimizer_->BeginGradients();
  if (fp32_) fp32_->ZeroGrads();
  return sync_->Zero(optimizer().steps_taken() + 1, local);
}

Status DataParallel::BeforeForward(size_t layer) {
  for (LayerHooks *h : hooks_) DST_RETURN_IF_ERROR(h->BeforeForward(layer));
  return Status::Ok();
}

Status DataParallel::BeforeBackward(size_t layer) {
  for (LayerHooks *h : hooks_) DST_RETURN_IF_ERROR(h->BeforeBackward(layer));
  return Status::Ok();
}

Status DataParallel::AfterBackward(size_t layer) {
  for (LayerHooks *h : hooks_) DST_RETURN_IF_ERROR(h->AfterBackward(layer));
  return Status::Ok();
}

Status DataParallel::BeforeInputGradient(size_t layer) {
  for (LayerHooks *h : hooks_) DST_RETURN_IF_ERROR(h->BeforeInputGradient(layer));
  return Status::Ok();
}

Status DataParallel::BeforeWeightGradient(size_t layer) {
  for (LayerHooks *h : hooks_) DST_RETURN_IF_ERROR(h->BeforeWeightGradient(layer));
  return Status::Ok();
}

// ---------------------------------------------------------------- whole tensors

Status DataParallel::ReadParam(int id, float *out) {
  const ParamDecl &d = shards_.decl(id);
  if (const TensorSlot *slot = fp32_ ? fp32_->Find(id) : nullptr) {
    ToHost(fp32_->values(*slot), d.numel, out);
    return Status::Ok();
  }
  if (params()) return params()->Read(id, out);
  ToHost(shards_.model->params().values() + d.offset, d.numel, out);
  return Status::Ok();
}

Status DataParallel::WriteParam(int id, const float *in) {
  const ParamDecl &d = shards_.decl(id);
  // The master weights this rank holds, then the parameters.
  DST_RETURN_IF_ERROR(optimizer_->WriteMasters(id, in));
  if (const TensorSlot *slot = fp32_ ? fp32_->Find(id) : nullptr)
    FromHost(in, d.numel, fp32_->values(*slot));
  if (params()) return params()->Write(id, in);
  FromHost(in, d.numel, shards_.model->params().values() + d.offset);
  return Status::Ok();
}

ShardInfo DataParallel::HeldParams() const {
  if (optimizer_->MastersAreParams()) return shards_.state_range;
  if (params()) return my_shard();
  return ShardInfo{0, shards_.layout.padded};
}

float *DataParallel::HostParams() {
  if (host_params_.size() == 0)
    host_params_ =
        Buffer<float>(shards_.tracker, MemoryCategory::kOffload, size_t(shards_.layout.padded));
  const ShardInfo held = HeldParams();
  if (optimizer_->MastersAreParams())
    (void)optimizer().state().Read(0, 0, held.size, host_params_.data());  // resident: cannot fail
  else
    ToHost(params() ? params()->shard_f32() : shards_.model->params().values(), held.size,
           host_params_.data());
  return host_params_.data();
}

float *DataParallel::FullParams() {
  const bool masters = optimizer_->MastersAreParams();
  const int64_t padded = shards_.layout.padded;
  if (!shards_.placement.on_host()) {  // as on the host: all of them, held in memory
    if (masters && std::string_view(optimizer().state().kind()) != "resident") return nullptr;
    return HeldParams().size == padded ? HostParams() : nullptr;
  }
  if (masters)  // the master weights, when they cover everything
    return shards_.state_range.size == padded ? const_cast<float *>(optimizer().state().Resident(0))
                                              : nullptr;
  if (!params()) return shards_.model->params().values();
  return shards_.dp->size() == 1 ? params()->shard_f32() : nullptr;
}

float *DataParallel::LocalParams(ShardInfo *range) {
  if (!shards_.placement.on_host()) {
    *range = HeldParams();
    return HostParams();
  }
  if (optimizer_->MastersAreParams()) {
    *range = shards_.state_range;
    return const_cast<float *>(optimizer().state().Resident(0));
  }
  if (params()) {
    *range = my_shard();
    return params()->shard_f32();
  }
  *range = ShardInfo{0, shards_.layout.padded};
  return shards_.model->params().values();
}

OwnState DataParallel::OwnStateBuffers() {
  OwnState out;
  sync_->AppendOwnState(&out);
  optimizer_->AppendOwnState(&out);
  // 0/1 Adam's local steps part the ranks' weights until the next synchronisation.
  if (optimizer().config().type == OptimizerType::kZeroOneAdam && shards_.dp->size() > 1) {
    ShardInfo held;
    if (float *params = LocalParams(&held))
      out.buffers.push_back({"zero_one.params", params, held.size, /*optional=*/true,
                             /*save=*/optimizer().ranks_parted()});
  }
  return out;
}

Status DataParallel::ParamsChanged() {
  if (!shards_.placement.on_host() && host_params_.size() > 0) {  // a load wrote the host copy
    const ShardInfo held = HeldParams();
    if (optimizer_->MastersAreParams())
      DST_RETURN_IF_ERROR(
          optimizer_->optimizer().state().Write(0, 0, held.size, host_params_.data()));
    else
      FromHost(host_params_.data(), held.size,
               params() ? params()->shard_f32() : shards_.model->params().values());
  }
  return optimizer_->WeightsLoaded();
}

std::optional<Half> DataParallel::activation_half() const {
  if (!shards_.wide()) return std::nullopt;
  return shards_.storage == StorageType::kFp16 ? Half::kFp16 : Half::kBf16;
}

void DataParallel::ToHost(const float *src, int64_t n, float *host) const {
  ops_.Download(host, src, size_t(n) * sizeof(float));
}

void DataParallel::FromHost(const float *host, int64_t n, float *dst) const {
  ops_.Upload(dst, host, size_t(n) * sizeof(float));
}

}  // namespace dst
