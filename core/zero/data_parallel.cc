#include "core/zero/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/cpu/optimizers.h"
#include "core/kernels/cpu/reduce.h"

namespace dst {

ShardLayout::ShardLayout(int64_t numel_, int64_t dp_) : numel(numel_), dp(dp_) {
  padded = (numel + dp - 1) / dp * dp;
}

DataParallel::DataParallel(const Config &config, int64_t numel, Communicator *dp,
                           MemoryTracker *tracker)
    : stage_(config.zero.stage), dp_(dp), layout_(numel, dp->size()) {
  // Stage 0 steps the whole (padded) buffer; stage 1 only its shard.
  const int64_t state_elements = stage_ == 0 ? layout_.padded : layout_.shard_size();
  optimizer_ = std::make_unique<Optimizer>(config.optimizer, state_elements, tracker);
  BuildBuckets(std::max<int64_t>(1, config.zero.reduce_bucket_size));
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

void DataParallel::BeginReduction() {
  pending_.clear();
  next_bucket_ = 0;
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

Status DataParallel::FinishReduction(float *grads) {
  if (dp_->size() == 1) return Status::Ok();
  while (next_bucket_ < buckets_.size()) Launch(grads, next_bucket_++);
  Status first;
  for (auto &work : pending_) {
    Status st = work->Wait();
    if (!st.ok() && first.ok()) first = st;
  }
  pending_.clear();
  DST_RETURN_IF_ERROR(first);
  const float k = 1.0f / float(dp_->size());
  if (stage_ == 0) {
    if (dp_->size() > 1) cpu::Scale(grads, layout_.padded, k);
  } else {
    const ShardInfo s = my_shard();
    cpu::Scale(grads + s.offset, s.size, k);
  }
  return Status::Ok();
}

Result<double> DataParallel::GradNorm(const float *grads) {
  if (stage_ == 0) return std::sqrt(cpu::SumOfSquares(grads, layout_.padded));
  const ShardInfo s = my_shard();
  float local = float(cpu::SumOfSquares(grads + s.offset, s.size));
  DST_RETURN_IF_ERROR(dp_->AllReduceSum(&local, 1)->Wait());
  return std::sqrt(double(local));
}

void DataParallel::ScaleGradients(float *grads, float k) {
  if (stage_ == 0) {
    cpu::Scale(grads, layout_.padded, k);
  } else {
    const ShardInfo s = my_shard();
    cpu::Scale(grads + s.offset, s.size, k);
  }
}

Status DataParallel::Step(float *params, const float *grads, double lr) {
  if (stage_ == 0) {
    optimizer_->Step(params, grads, lr);
    return Status::Ok();
  }
  const ShardInfo s = my_shard();
  optimizer_->Step(params + s.offset, grads + s.offset, lr);
  return dp_->AllGather(params, s.size)->Wait();
}

Status DataParallel::GatherGradients(float *grads) {
  if (stage_ == 0) return Status::Ok();
  return dp_->AllGather(grads, my_shard().size)->Wait();
}

Result<double> DataParallel::Average(double value) {
  if (dp_->size() == 1) return value;
  float v = float(value);
  DST_RETURN_IF_ERROR(dp_->AllReduceSum(&v, 1)->Wait());
  return double(v) / double(dp_->size());
}

}  // namespace dst
