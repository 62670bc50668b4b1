#include "core/zero/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/kernels/cpu/optimizers.h"
#include "core/kernels/cpu/reduce.h"

namespace dst {

ParamStoreOptions StoreOptionsForStage(int stage, int64_t dp_size) {
  ParamStoreOptions options;
  options.pad_multiple = dp_size;
  options.full_grads = stage < 2;
  options.full_values = stage < 3;
  return options;
}

DataParallel::DataParallel(const Config &config, Model<float> *model, Communicator *dp,
                           MemoryTracker *tracker)
    : stage_(config.zero.stage),
      dp_(dp),
      model_(model),
      layout_(model->params().size(), dp->size()),
      overlap_(config.zero.overlap_comm && dp->size() > 1),
      tracker_(tracker) {
  // Stage 0 steps the whole (padded) buffer; stages 1-3 only their shard.
  const int64_t state_elements = stage_ == 0 ? layout_.padded : layout_.shard_size();
  optimizer_ = std::make_unique<Optimizer>(config.optimizer, state_elements, tracker);
  const int64_t bucket = std::max<int64_t>(1, config.zero.reduce_bucket_size);
  if (stage_ <= 1) {
    BuildBuckets(bucket);
    return;
  }
  ParamStore<float> &store = model->params();
  plan_ = BuildPartitionPlan(store.decls(), model->layer_params(),
                             stage_ >= 3 ? config.zero.stage3_param_persistence_threshold : -1);
  GradPartitionOptions grad_options;
  grad_options.double_buffer = overlap_;
  grad_options.bucket_elements = bucket;
  grads_ = std::make_unique<GradientPartition>(&plan_, layout_, dp_, &store, tracker, grad_options);
  if (stage_ >= 3)
    params_ = std::make_unique<ParameterPartition>(&plan_, layout_, dp_, &store, tracker,
                                                   model->spec().seed,
                                                   config.zero.stage3_prefetch_bucket_size);
}

// Waits for collectives in flight before the buffers they use go away.
DataParallel::~DataParallel() {
  params_.reset();
  grads_.reset();
  pending_.clear();
}

void DataParallel::BuildBuckets(int64_t bucket_elements) {
  buckets_.clear();
  int64_t end = layout_.padded;
  while (end > 0) {
    int64_t begin = std::max<int64_t>(0, end - bucket_elements);
    GradBucket bucket{begin, end, -1};
    if (stage_ >= 1) {
      // A stage-1 bucket never straddles two shards: it is reduced to one owner.
      const int64_t owner = layout_.OwnerOf(end - 1);
      bucket.begin = std::max(begin, layout_.Shard(owner).offset);
      bucket.root = owner;
    }
    buckets_.push_back(bucket);
    end = bucket.begin;
  }
}

float *DataParallel::ShardGrads() {
  if (grads_) return grads_->shard();
  return model_->params().grads() + (stage_ == 0 ? 0 : my_shard().offset);
}

float *DataParallel::ShardParams() {
  if (params_) return params_->shard();
  return model_->params().values() + (stage_ == 0 ? 0 : my_shard().offset);
}

// ---------------------------------------------------------------- backward

Status DataParallel::ZeroGradients() {
  gathered_grads_ = Buffer<float>();
  launch_buckets_ = false;
  if (grads_) return grads_->Zero();
  std::memset(model_->params().grads(), 0, size_t(layout_.padded) * sizeof(float));
  pending_.clear();
  next_bucket_ = 0;
  return Status::Ok();
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

Status DataParallel::AfterBackward(size_t layer) {
  if (grads_) return grads_->AfterBackward(layer);
  if (launch_buckets_)
    GradientsFinalAbove(model_->params().grads(), model_->GradientsFinalBoundary(layer));
  return Status::Ok();
}

void DataParallel::Launch(float *grads, size_t b) {
  const GradBucket &bucket = buckets_[b];
  float *data = grads + bucket.begin;
  const int64_t count = bucket.end - bucket.begin;
  pending_.push_back(bucket.root < 0 ? dp_->AllReduceSum(data, count)
                                     : dp_->ReduceSum(data, count, bucket.root));
}

void DataParallel::GradientsFinalAbove(float *grads, int64_t boundary) {
  if (dp_->size() == 1) return;  // nothing to reduce (and nothing to allocate)
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= boundary)
    Launch(grads, next_bucket_++);
}

// ---------------------------------------------------------------- reduction and step

Status DataParallel::FinishReduction() {
  if (dp_->size() == 1) return grads_ ? grads_->Drain() : Status::Ok();
  if (grads_) {
    DST_RETURN_IF_ERROR(grads_->Drain());
  } else {
    float *grads = model_->params().grads();
    while (next_bucket_ < buckets_.size()) Launch(grads, next_bucket_++);
    Status first;
    for (auto &work : pending_) {
      Status st = work->Wait();
      if (!st.ok() && first.ok()) first = st;
    }
    pending_.clear();
    DST_RETURN_IF_ERROR(first);
  }
  const float k = 1.0f / float(dp_->size());
  cpu::Scale(ShardGrads(), stage_ == 0 ? layout_.padded : layout_.shard_size(), k);
  return Status::Ok();
}

Result<double> DataParallel::GradNorm() {
  if (stage_ == 0) return std::sqrt(cpu::SumOfSquares(model_->params().grads(), layout_.padded));
  float local = float(cpu::SumOfSquares(ShardGrads(), layout_.shard_size()));
  if (dp_->size() > 1) DST_RETURN_IF_ERROR(dp_->AllReduceSum(&local, 1)->Wait());
  return std::sqrt(double(local));
}

void DataParallel::ScaleGradients(float k) {
  cpu::Scale(ShardGrads(), stage_ == 0 ? layout_.padded : layout_.shard_size(), k);
}

Status DataParallel::Step(double lr) {
  if (stage_ == 0) {
    optimizer_->Step(model_->params().values(), model_->params().grads(), lr);
    return Status::Ok();
  }
  if (params_) DST_RETURN_IF_ERROR(params_->Drain());
  optimizer_->Step(ShardParams(), ShardGrads(), lr);
  if (params_) return params_->ShardChanged();
  if (dp_->size() == 1) return Status::Ok();
  return dp_->AllGather(model_->params().values(), layout_.shard_size())->Wait();
}

Status DataParallel::GatherGradients() {
  if (stage_ == 0) return Status::Ok();
  if (!grads_) return dp_->AllGather(model_->params().grads(), my_shard().size)->Wait();
  gathered_grads_ = Buffer<float>(tracker_, MemoryCategory::kGradients, size_t(layout_.padded));
  const ShardInfo s = my_shard();
  std::memcpy(gathered_grads_.data() + s.offset, grads_->shard(), size_t(s.size) * sizeof(float));
  return dp_->AllGather(gathered_grads_.data(), s.size)->Wait();
}

// ---------------------------------------------------------------- whole tensors

Status DataParallel::ReadParam(int id, float *out) {
  if (params_) return params_->Read(id, out);
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  std::memcpy(out, model_->params().values() + d.offset, size_t(d.numel) * sizeof(float));
  return Status::Ok();
}

Status DataParallel::WriteParam(int id, const float *in) {
  if (params_) return params_->Write(id, in);
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  std::memcpy(model_->params().values() + d.offset, in, size_t(d.numel) * sizeof(float));
  return Status::Ok();
}

Status DataParallel::ReadGrad(int id, float *out) const {
  const ParamDecl &d = model_->params().decls()[size_t(id)];
  const float *full = grads_ ? gathered_grads_.data() : model_->params().grads();
  if (!full)
    return StateError("get_grad: at ZeRO stage " + std::to_string(stage_) +
                      " each rank keeps only its shard of the gradients; the full gradient is "
                      "gathered by forward_backward and kept until the next train_batch or "
                      "forward_backward. Call dst_engine_forward_backward first");
  std::memcpy(out, full + d.offset, size_t(d.numel) * sizeof(float));
  return Status::Ok();
}

float *DataParallel::FullParams() {
  if (!params_) return model_->params().values();
  return dp_->size() == 1 ? params_->shard() : nullptr;
}

float *DataParallel::LocalParams(ShardInfo *range) {
  if (params_) {
    *range = my_shard();
    return params_->shard();
  }
  *range = ShardInfo{0, layout_.padded};
  return model_->params().values();
}

Status DataParallel::ParamsChanged() {
  return params_ ? params_->ShardChanged() : Status::Ok();
}

}  // namespace dst
