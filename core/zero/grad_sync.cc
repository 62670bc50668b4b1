#include "core/zero/grad_sync.h"

#include <string>

namespace dst {

GradientSync::GradientSync(const ZeroShards *shards, const GradSyncOptions &options)
    : shards_(*shards), options_(options), ops_(shards->placement) {}

// Waits for reductions in flight before the buffers they use go away.
GradientSync::~GradientSync() {
  grads_.reset();
}

const std::vector<GradBucket> &GradientSync::buckets() const {
  static const std::vector<GradBucket> kNone;
  return kNone;
}

Status GradientSync::Zero(int64_t step, bool local) {
  if (observer_) observer_->BeforeGradsWrite();
  local_ = local;
  gathered_ = false;
  // gradient_compression's warm-up: the first steps reduce uncompressed.
  return ZeroStrategy(step > options_.compression_warmup);
}

Status GradientSync::BeforeBackward(size_t layer) {
  return grads_ ? grads_->BeforeBackward(layer) : Status::Ok();
}

// Split backward: the weight half writes the layer's gradients, staged and
// reduced as a whole backward's would be.
Status GradientSync::BeforeWeightGradient(size_t layer) {
  return grads_ ? grads_->BeforeBackward(layer) : Status::Ok();
}

Status GradientSync::AfterBackward(size_t layer) {
  return grads_ ? grads_->AfterBackward(layer) : Status::Ok();
}

Status GradientSync::Finish() {
  const ShardInfo range = shards_.state_range;
  const double pre_scale = shards_.pre_scale;
  const StepKernels &step = shards_.placement.step();
  if (local_) {  // each rank's own gradients: only the predivision undone (fp32)
    if (shards_.wide() || pre_scale == 1.0) return Status::Ok();
    if (observer_) observer_->BeforeGradsWrite();
    step.ScaleRange(float(1.0 / pre_scale), range.size, static_cast<float *>(StateGrads()));
    return step.TakeError();
  }
  DST_RETURN_IF_ERROR(FinishStrategy());
  if (shards_.fp32) DST_RETURN_IF_ERROR(shards_.fp32->ReduceGrads(*shards_.dp));
  if (shards_.wide()) return Status::Ok();  // 16 bits: averaged in the step
  const int64_t ranks = shards_.dp->size();
  if (pre_scale == 1.0 && ranks == 1) return Status::Ok();
  const float k = pre_scale == 1.0 ? 1.0f / float(ranks) : float(1.0 / (double(ranks) * pre_scale));
  if (observer_) observer_->BeforeGradsWrite();
  step.ScaleRange(k, range.size, static_cast<float *>(StateGrads()));
  if (observer_) observer_->GradsScaled(k);
  return step.TakeError();
}

Status GradientSync::ReadStored(int id, float *out) {
  const ParamDecl &d = shards_.decl(id);
  if (const TensorSlot *slot = shards_.fp32 ? shards_.fp32->Find(id) : nullptr) {
    shards_.placement.step().CopyRange(shards_.fp32->grads(*slot), d.numel, out);
    return Status::Ok();  // whole on every rank
  }
  const ShardInfo part = shards_.StatePartOf(id);
  ops_.ZeroFloats(out, d.numel);
  const uint8_t *grads = static_cast<const uint8_t *>(StateGrads());
  const size_t at =
      size_t(part.offset - shards_.state_range.offset) * ElementBytes(shards_.storage);
  ops_.Widen(shards_.storage, grads + at, out + (part.offset - d.offset), part.size);
  // Stages 1-3: the shards are disjoint, so their sum is the whole tensor.
  if (shards_.stage >= 1 && shards_.dp->size() > 1)
    DST_RETURN_IF_ERROR(shards_.dp->AllReduceSum(out, d.numel)->Wait());
  return Status::Ok();
}

Status GradientSync::AddStored(int id, const float *in) {
  const ParamDecl &d = shards_.decl(id);
  if (const TensorSlot *slot = shards_.fp32 ? shards_.fp32->Find(id) : nullptr) {
    shards_.placement.step().AddRange(in, d.numel, shards_.fp32->grads(*slot));
    return Status::Ok();
  }
  const ShardInfo part = shards_.StatePartOf(id);
  uint8_t *grads = static_cast<uint8_t *>(StateGrads());
  if (observer_) observer_->GradsChanged(), observer_->BeforeGradsWrite();
  const size_t at =
      size_t(part.offset - shards_.state_range.offset) * ElementBytes(shards_.storage);
  ops_.AddInto(shards_.storage, in + (part.offset - d.offset), grads + at, part.size);
  return Status::Ok();
}

Status GradientSync::ReadGrad(int id, double factor, float *out) const {
  const int stage = shards_.stage;
  const ParamDecl &d = shards_.decl(id);
  if (stage >= 1 && !gathered_ && (stage >= 2 || shards_.wide()))
    return StateError("get_grad: at ZeRO stage " + std::to_string(stage) +
                      " each rank keeps only its shard of the reduced gradients; the full "
                      "gradient is gathered by forward_backward and kept until the next "
                      "train_batch or forward_backward. Call dst_engine_forward_backward first");
  const auto scale = [&] {
    const float f = float(factor);
    for (int64_t i = 0; i < d.numel; ++i) out[i] *= f;
  };
  if (const TensorSlot *slot = shards_.fp32 ? shards_.fp32->Find(id) : nullptr) {
    ops_.Download(out, shards_.fp32->grads(*slot), size_t(d.numel) * sizeof(float));
    scale();  // whole, fp32, summed
    return Status::Ok();
  }
  ops_.WidenToHost(
      shards_.storage,
      static_cast<const uint8_t *>(FullGrads()) + size_t(d.offset) * ElementBytes(shards_.storage),
      out, d.numel);
  if (shards_.wide()) scale();
  return Status::Ok();
}

namespace {

// Stages 0, 1: the full buffer in buckets.
class BucketedSync final : public GradientSync {
 public:
  BucketedSync(const ZeroShards *shards, const GradSyncOptions &options)
      : GradientSync(shards, options) {
    const ZeroShards &s = *shards;
    if (s.wide()) {  // staged and rounded into the full 16-bit buffer
      GradPartitionOptions staging;
      staging.bucket_elements = options.bucket_elements;
      staging.storage = s.storage;
      staging.wire = options.wire;
      grads_ =
          std::make_unique<GradientPartition>(s.plan, ShardLayout(s.layout.padded, 1), s.local,
                                              &s.model->params(), s.tracker, staging, s.placement);
    }
    buckets_ = std::make_unique<BucketReducer>(
        s.layout, s.stage, s.dp, Full(), s.storage, options.wire, options.bucket_elements,
        s.tracker, options.compression ? &options_.codec : nullptr, s.placement);
  }
  ~BucketedSync() override { buckets_.reset(); }

  void SetObserver(GradObserver *observer) override {
    GradientSync::SetObserver(observer);
    buckets_->SetOnReduced(
        [observer](int64_t begin, int64_t count) { observer->GradsFinal(begin, count); });
  }
  void BeginBackward(bool last, bool last_of_chunk) override {
    launch_ = options_.overlap && last;
    if (grads_) grads_->SetFinalPass(last_of_chunk);
  }
  Status AfterBackward(size_t layer) override {
    DST_RETURN_IF_ERROR(GradientSync::AfterBackward(layer));
    if (!launch_) return Status::Ok();
    return buckets_->LaunchAbove(shards_.model->GradientsFinalBoundary(layer));
  }
  void *StateGrads() override {
    return static_cast<uint8_t *>(Full()) +
           size_t(shards_.state_range.offset) * ElementBytes(shards_.storage);
  }
  Status Gather() override {
    if (shards_.stage == 1 && shards_.dp->size() > 1)
      DST_RETURN_IF_ERROR(
          AllGather(*shards_.dp, shards_.storage, Full(), shards_.layout.shard_size())->Wait());
    gathered_ = true;
    return Status::Ok();
  }
  const CompressionTotals *compression_totals() const override {
    return buckets_->compressor() ? &buckets_->compressor()->totals() : nullptr;
  }
  void AppendOwnState(OwnState *out) override {
    if (GradCompressor *c = buckets_->compressor()) c->AppendOwnState("grad_compression.", out);
  }
  void ResetOwnState() override {
    if (GradCompressor *c = buckets_->compressor()) c->ResetOwnState();
  }
  const std::vector<GradBucket> &buckets() const override { return buckets_->buckets(); }

 private:
  Status ZeroStrategy(bool compressed) override {
    launch_ = false;
    Status st = buckets_->Reset();
    buckets_->SetLocal(local_);
    buckets_->SetCompressed(compressed);
    if (grads_) {
      Status zero = grads_->Zero();
      if (st.ok()) st = zero;
    } else {
      shards_.placement.step().ZeroRange(shards_.layout.padded, shards_.model->params().grads());
    }
    return st;
  }
  Status FinishStrategy() override { return buckets_->Finish(); }
  const void *FullGrads() const override { return const_cast<BucketedSync *>(this)->Full(); }
  // The full gradient buffer (storage type): the model's fp32 gradients, or
  // the 16-bit one the staging rounds into.
  void *Full() { return grads_ ? grads_->shard() : shards_.model->params().grads(); }

  std::unique_ptr<BucketReducer> buckets_;
  bool launch_ = false;  // this backward launches buckets as layers finish
};

// Stages 2, 3: each layer's gradients to their owners.
class PartitionedSync final : public GradientSync {
 public:
  PartitionedSync(const ZeroShards *shards, const GradSyncOptions &options)
      : GradientSync(shards, options) {
    const ZeroShards &s = *shards;
    GradPartitionOptions partition;
    partition.bucket_elements = options.bucket_elements;
    partition.storage = s.storage;
    partition.wire = options.wire;
    partition.double_buffer = options.overlap;
    partition.once_per_step = options.once_per_step;
    if (options.compression) partition.codec = &options_.codec;
    grads_ = std::make_unique<GradientPartition>(s.plan, s.layout, s.dp, &s.model->params(),
                                                 s.tracker, partition, s.placement);
  }

  void SetObserver(GradObserver *observer) override {
    GradientSync::SetObserver(observer);
    grads_->SetOnFinal(
        [observer](int64_t begin, int64_t count) { observer->GradsFinal(begin, count); });
  }
  void BeginBackward(bool last, bool last_of_chunk) override {
    (void)last;
    grads_->SetFinalPass(last_of_chunk);
  }
  void *StateGrads() override { return grads_->shard(); }
  Status Gather() override {
    const ZeroShards &s = shards_;
    gathered_grads_ = FlatBuffer(s.tracker, MemoryCategory::kGradients, s.storage, s.layout.padded,
                                 s.placement.memory);
    const ShardInfo mine = s.my_shard();
    ops_.Copy(s.storage, grads_->shard(), gathered_grads_.at(mine.offset), mine.size);
    if (s.dp->size() > 1)
      DST_RETURN_IF_ERROR(AllGather(*s.dp, s.storage, gathered_grads_.at(0), mine.size)->Wait());
    gathered_ = true;
    return Status::Ok();
  }
  const CompressionTotals *compression_totals() const override {
    return grads_->compressor() ? &grads_->compressor()->totals() : nullptr;
  }
  void AppendOwnState(OwnState *out) override {
    if (SparseReduceScatter *c = grads_->compressor()) c->AppendOwnState(out);
  }
  void ResetOwnState() override {
    if (SparseReduceScatter *c = grads_->compressor()) c->ResetOwnState();
  }

 private:
  Status ZeroStrategy(bool compressed) override {
    gathered_grads_ = FlatBuffer();  // the last forward_backward's, charged to gradients
    grads_->SetCompressed(compressed);
    return grads_->Zero();
  }
  Status FinishStrategy() override { return grads_->Drain(); }
  const void *FullGrads() const override { return gathered_grads_.at(0); }

  FlatBuffer gathered_grads_;  // [padded] after Gather, until the next step begins
};

}  // namespace

std::unique_ptr<GradientSync> MakeGradientSync(const ZeroShards *shards,
                                               const GradSyncOptions &options) {
  if (shards->stage >= 2) return std::make_unique<PartitionedSync>(shards, options);
  return std::make_unique<BucketedSync>(shards, options);
}

}  // namespace dst
