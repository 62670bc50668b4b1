#include "core/engine/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "core/engine/swap_resume.h"
#include "core/optim/lr_schedule.h"

namespace dst {

namespace {
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
}  // namespace

Executor::Executor(const Config &config, Model<float> *model, DataParallelism *dp,
                   LossScaler *scaler, TrainingProgress *progress)
    : config_(config), model_(model), dp_(dp), scaler_(scaler), progress_(progress) {}

double Executor::NextLearningRate() const {
  // DeepSpeed does not advance the schedule on a step skipped for overflow.
  return LearningRateAt(config_.scheduler, config_.optimizer.lr, progress_->lr_iteration());
}

MicroBatch<float> Executor::MicroBatchAt(const BatchView &b, int64_t index) const {
  const ModelSpec &spec = model_->spec();
  MicroBatch<float> mb;
  mb.B = config_.train_micro_batch_size_per_gpu;
  const int64_t first = index * mb.B;
  if (spec.IsLanguageModel()) {
    mb.seq = int64_t(b.seq_len);
    mb.tokens = b.tokens + first * mb.seq;
    mb.targets = b.targets + first * mb.seq;
  } else {
    mb.seq = 1;
    mb.inputs = b.inputs + first * spec.input_dim;
    if (b.labels) mb.labels = b.labels + first * spec.SequentialOutputDim();
    if (b.targets) mb.targets = b.targets + first;
  }
  return mb;
}

// The targets of micro-batch `index` that are not ignored, counted on the
// host (a deferred loss needs the count without reading the device).
int64_t Executor::CountedTargets(const BatchView &host, int64_t index) const {
  const ModelSpec &spec = model_->spec();
  const int64_t B = config_.train_micro_batch_size_per_gpu;
  const int64_t per_sample = spec.IsLanguageModel() ? int64_t(host.seq_len) : 1;
  if (!host.targets) return 0;
  const int32_t *t = host.targets + index * B * per_sample;
  return std::count_if(t, t + B * per_sample, [](int32_t v) { return v != kIgnoredTarget; });
}

// Each tensor once in the norm: the tied wte's second copy and, on all tp
// ranks but the first, the tensors every tp rank holds whole (a tied copy is
// one of those too: listed once). Built when the parallel layout is set, so
// a step allocates nothing.
void Executor::UpdateNormExclusions() {
  norm_excluded_.clear();
  if (tied_ && tied_->excluded_from_norm() >= 0)
    norm_excluded_.push_back(tied_->excluded_from_norm());
  if (tp_ && tp_->rank() != 0)
    norm_excluded_.insert(norm_excluded_.end(), tp_replicated_.begin(), tp_replicated_.end());
  std::sort(norm_excluded_.begin(), norm_excluded_.end());
  norm_excluded_.erase(std::unique(norm_excluded_.begin(), norm_excluded_.end()),
                       norm_excluded_.end());
  UpdateTensorReducers();
}

void Executor::SetTensorParallel(Communicator *tp, std::vector<int> replicated) {
  tp_ = tp, tp_replicated_ = std::move(replicated);
  UpdateNormExclusions();
}

// Lamb's and 1-bit LAMB's per-tensor values over the tensor-parallel slices
// and the pipeline's stages (TensorReducers, optimizer.h).
void Executor::UpdateTensorReducers() {
  TensorReducers r;
  if (tp_ && tp_->size() > 1) {
    r.sum_over_slices = [this](std::vector<double> *v, int k) { return SumOverSlices(v, k); };
    r.max_over_slices = [this](std::vector<double> *v) { return MaxOverSlices(v); };
  }
  if (link_) r.sum_over_stages = [this](double value) { return link_->SumOverStages(value); };
  if (tied_ && tied_->excluded_from_norm() >= 0)
    r.counted_elsewhere = {tied_->excluded_from_norm()};
  dp_->SetTensorReducers(std::move(r));
}

Status Executor::SumOverSlices(std::vector<double> *values, int per_tensor) const {
  std::vector<float> wire(values->begin(), values->end());
  if (tp_->rank() != 0)  // every tp rank holds these whole: the first counts them
    for (int id : tp_replicated_)
      std::fill_n(wire.begin() + ptrdiff_t(id) * per_tensor, per_tensor, 0.0f);
  DST_RETURN_IF_ERROR(tp_->AllReduceSum(wire.data(), int64_t(wire.size()))->Wait());
  std::copy(wire.begin(), wire.end(), values->begin());
  return Status::Ok();
}

Status Executor::MaxOverSlices(std::vector<double> *values) const {
  const size_t n = values->size();
  std::vector<float> all(n * size_t(tp_->size()));
  std::copy(values->begin(), values->end(), all.begin() + ptrdiff_t(n * size_t(tp_->rank())));
  DST_RETURN_IF_ERROR(tp_->AllGather(all.data(), int64_t(n))->Wait());
  for (size_t r = 0; r < size_t(tp_->size()); ++r)
    for (size_t i = 0; i < n; ++i) (*values)[i] = std::max((*values)[i], double(all[r * n + i]));
  return Status::Ok();
}

Result<double> Executor::ClipGradients() {
  const double max_norm = config_.gradient_clipping;
  if (!link_ && !tp_) return dp_->ClipGradients(max_norm);
  const NormReducer over_groups = [this](double squared) -> Result<double> {
    if (tp_) {
      Result<double> summed = SumOverGroup(*tp_, squared);
      if (!summed.ok() || !link_) return summed;
      squared = summed.value();
    }
    return link_->SumOverStages(squared);
  };
  return dp_->ClipGradients(max_norm, norm_excluded_, over_groups);
}

Result<double> Executor::JobLoss(double loss_sum) {
  Result<double> mean = dp_->Average(loss_sum);
  if (!mean.ok() || !link_) return mean;
  return link_->SumOverStages(mean.value());  // the other stages add 0
}

Status Executor::Clip(double loss_sum, StepRecord *rec) {
  const int64_t step = progress_->steps;
  Result<double> norm = ClipGradients();
  if (!norm.ok()) return norm.status();
  rec->grad_norm = norm.value();
  Result<double> global_loss = JobLoss(loss_sum);
  if (!global_loss.ok()) return global_loss.status();
  if (!std::isfinite(rec->grad_norm) || !std::isfinite(global_loss.value())) {
    if (scaler_->enabled()) {  // fp16 overflow: every rank skips this step
      rec->skipped = true;
      ++progress_->skipped_steps;
      Status st = scaler_->Update(/*overflow=*/true);
      if (!st.ok()) return st.context("train_batch at step " + std::to_string(step));
      return Status::Ok();
    }
    return Status(Code::kNumeric,
                  "train_batch: the loss or the gradients are not finite at step " +
                      std::to_string(step) + " (loss " + std::to_string(loss_sum) +
                      ", gradient norm " + std::to_string(rec->grad_norm) +
                      "); the step was skipped and the weights are unchanged. Lower the "
                      "learning rate or set gradient_clipping");
  }
  return Status::Ok();
}

Status Executor::Finish(const BatchView &batch, double loss_sum,
                        std::chrono::steady_clock::time_point start, StepRecord *rec) {
  Result<double> mean = JobLoss(loss_sum / double(rec->micro_batches));
  if (!mean.ok()) return mean.status();
  rec->loss = mean.value();
  rec->seconds = SecondsSince(start);
  rec->phases.total = rec->seconds;
  if (link_) {
    const PipeTimes &t = link_->times();
    rec->phases.send_output = t.send_output, rec->phases.recv_input = t.recv_input;
    rec->phases.send_grad = t.send_grad, rec->phases.recv_grad = t.recv_grad;
  }
  rec->samples = int64_t(batch.n_samples) * config_.dp_size;
  const bool gpt = model_->spec().IsLanguageModel();
  rec->tokens = rec->samples * (gpt ? int64_t(batch.seq_len) : 1);
  return Status::Ok();
}

Status Executor::RunPipeOp(const Instruction &ins, const BatchView &batch, PhaseTimes *phases) {
  if (!link_)
    return InternalError(std::string("executor: ") + OpName(ins.op) +
                         " in a program without a pipeline");
  const int64_t rows = model_->BoundaryRows(MicroBatchAt(batch, ins.micro_batch).rows());
  switch (ins.op) {
    case Op::kRecvActivation:
      return link_->RecvActivation(ins.chunk, ins.micro_batch, rows);
    case Op::kSendActivation:
      return link_->SendActivation(ins.chunk, ins.micro_batch);
    case Op::kRecvGradient:
      return link_->RecvGradient(ins.chunk, ins.micro_batch, rows);
    case Op::kSendGradient:
      return link_->SendGradient(ins.chunk, ins.micro_batch);
    default:
      break;
  }
  (void)phases;
  return InternalError(std::string("executor: ") + OpName(ins.op) + " is not a pipeline op");
}

Status Executor::Run(const std::vector<Instruction> &program, const BatchView &host_batch,
                     StepRecord *record) {
  // On a device the layers read the batch where they compute.
  const BatchView batch = device_batch_ ? device_batch_->Stage(host_batch) : host_batch;
  int64_t micro_batches = 0;
  bool training = false;
  for (const Instruction &ins : program) {
    micro_batches += ins.op == Op::kForward && ins.chunk == 0;
    training |= ins.op == Op::kBackward || ins.op == Op::kBackwardInput;
  }
  // fp16: the loss is scaled up before backward (scale() is 1 otherwise).
  // prescale_gradients / gradient_predivide_factor: divided before the reduction.
  const float grad_scale = float(scaler_->scale() * dp_->GradPreScale()) / float(micro_batches);
  dp_->SetLossScale(scaler_->scale());
  const int64_t step = progress_->steps;
  const bool inject_overflow = std::find(inject_overflow_at_.begin(), inject_overflow_at_.end(),
                                         step) != inject_overflow_at_.end();
  StepRecord rec;
  rec.micro_batches = micro_batches;
  const auto step_start = Clock::now();
  rec.start = step_start;
  const bool timeline = link_ || record_timeline_;
  double loss_sum = 0;
  auto at_step = [step](const char *what) {
    return std::string(what) + " at step " + std::to_string(step);
  };
  // The loss layer adds the micro-batches' losses on the device; the host
  // reads their sum once, where the step first needs it.
  const bool deferred = model_->defers_loss();
  if (deferred) model_->ZeroLossSum();
  bool loss_read = !deferred;
  auto read_loss = [&]() -> Status {
    if (loss_read) return Status::Ok();
    loss_read = true;
    Result<double> sum = model_->ReadLossSum();
    if (!sum.ok()) return Status(sum.status()).context(at_step("reading the loss"));
    loss_sum = sum.value();
    return Status::Ok();
  };
  if (link_)
    DST_RETURN_IF_ERROR(link_->BeginStep(
        micro_batches, model_->BoundaryRows(MicroBatchAt(batch, 0).rows()), training));
  // With a pipeline, a chunk's input and output gradient cross stages.
  auto receives = [this](int64_t chunk) { return link_ && !link_->is_first(chunk); };
  auto sends = [this](int64_t chunk) { return link_ && !link_->is_last(chunk); };
  for (const Instruction &ins : program) {
    if (Raised(abort_)) return AbortedError(at_step("training"));
    const auto t0 = Clock::now();
    if (timeline) {  // the previous action ends where this one starts
      if (!rec.timeline.empty())
        rec.timeline.back().end = std::chrono::duration<double>(t0 - step_start).count();
      rec.timeline.push_back({OpName(ins.op), ins.micro_batch, ins.chunk,
                              std::chrono::duration<double>(t0 - step_start).count(), 0.0});
    }
    switch (ins.op) {
      case Op::kZeroGradients: {
        Status st = dp_->ZeroGradients();
        if (!st.ok()) return st.context(at_step("zeroing gradients"));
        break;
      }
      case Op::kForward: {
        MicroBatch<float> mb = MicroBatchAt(batch, ins.micro_batch);
        mb.backward_follows = training;  // an eval program keeps nothing for a backward
        if (deferred) {
          mb.loss_sum = model_->loss_sum();
          mb.counted = CountedTargets(host_batch, ins.micro_batch);
        }
        const LayerRange range = model_->chunk(size_t(ins.chunk));
        const float *input =
            receives(ins.chunk) ? link_->activation_input(ins.chunk, ins.micro_batch) : nullptr;
        const float *output = nullptr;
        Status st = model_->Forward(ins.slot, range, input, mb, dp_, &output);
        if (!st.ok()) return st.context(at_step("forward"));
        if (sends(ins.chunk)) {
          st = link_->KeepOutput(ins.chunk, ins.micro_batch, output,
                                 model_->BoundaryRows(mb.rows()));
          if (!st.ok()) return st.context(at_step("forward"));
        }
        if (range.end == model_->all_layers().end && model_->has_loss() && !deferred)
          loss_sum += model_->Loss(ins.slot);
        if (link_ && !training) link_->Release(ins.chunk, ins.micro_batch);
        rec.phases.forward += SecondsSince(t0);
        break;
      }
      case Op::kBackward:
      case Op::kBackwardInput:
      case Op::kBackwardWeight: {
        MicroBatch<float> mb = MicroBatchAt(batch, ins.micro_batch);
        mb.grad_scale = grad_scale;
        if (inject_overflow && ins.last_backward)
          mb.grad_scale = std::numeric_limits<float>::infinity();
        const LayerRange range = model_->chunk(size_t(ins.chunk));
        Status st;
        if (ins.op == Op::kBackwardWeight) {
          dp_->BeginBackward(ins.last_backward, ins.last_of_chunk);
          st = model_->BackwardWeight(ins.slot, range, mb, dp_);
        } else {
          float *dout =
              sends(ins.chunk) ? link_->gradient_input(ins.chunk, ins.micro_batch) : nullptr;
          float *din = nullptr;
          if (receives(ins.chunk)) {
            st = link_->GradientOutput(ins.chunk, ins.micro_batch, model_->BoundaryRows(mb.rows()),
                                       &din);
            if (!st.ok()) return st.context(at_step(OpName(ins.op)));
          }
          if (ins.op == Op::kBackward) {
            dp_->BeginBackward(ins.last_backward, ins.last_of_chunk);
            st = model_->Backward(ins.slot, range, dout, din, mb, dp_);
          } else {
            st = model_->BackwardInput(ins.slot, range, dout, din, mb, dp_);
          }
        }
        if (!st.ok()) return st.context(at_step(OpName(ins.op)));
        // The received buffers are read until the micro-batch's last half.
        if (link_ && ins.op != Op::kBackwardInput) link_->Release(ins.chunk, ins.micro_batch);
        rec.phases.backward += SecondsSince(t0);
        break;
      }
      case Op::kRecvActivation:
      case Op::kSendActivation:
      case Op::kRecvGradient:
      case Op::kSendGradient: {
        Status st = RunPipeOp(ins, batch, &rec.phases);
        if (st.ok() && ins.ends_exchange) st = link_->EndExchange();
        if (!st.ok()) return st.context(at_step(OpName(ins.op)));
        break;
      }
      case Op::kReduceGradients: {
        if (link_) {
          Status sent = link_->FinishSends();
          if (!sent.ok()) return sent.context(at_step("finishing the pipeline's sends"));
        }
        Status st = dp_->FinishReduction();
        if (!st.ok()) return st.context(at_step("reducing gradients"));
        rec.phases.reduce += SecondsSince(t0);
        break;
      }
      case Op::kReduceTiedGradients: {
        if (tied_) {
          Status st = tied_->SumGradients(*dp_);
          if (!st.ok()) return st.context(at_step("reducing tied gradients"));
        }
        rec.phases.reduce += SecondsSince(t0);
        break;
      }
      case Op::kGatherGradients: {
        Status st = dp_->GatherGradients();
        if (!st.ok()) return st.context(at_step("gathering gradients"));
        rec.phases.reduce += SecondsSince(t0);
        break;
      }
      case Op::kClipGradients: {
        DST_RETURN_IF_ERROR(read_loss());
        DST_RETURN_IF_ERROR(Clip(loss_sum, &rec));
        rec.phases.step += SecondsSince(t0);
        break;
      }
      case Op::kOptimizerStep: {
        rec.lr = NextLearningRate();
        if (!rec.skipped) {
          if (dp_->KeepsCommitNotes())
            dp_->SetCommitNote(CommitNoteAfterStep(*progress_, *scaler_));
          DST_RETURN_IF_ERROR(dp_->Step(rec.lr));
          DST_RETURN_IF_ERROR(scaler_->Update(/*overflow=*/false));
        }
        ++progress_->steps;  // DeepSpeed's global_steps counts skipped steps too
        rec.phases.step += SecondsSince(t0);
        break;
      }
      case Op::kRecordStep: {
        if (link_) DST_RETURN_IF_ERROR(link_->FinishSends());
        if (timeline) rec.timeline.back().end = SecondsSince(step_start);
        DST_RETURN_IF_ERROR(read_loss());
        DST_RETURN_IF_ERROR(Finish(batch, loss_sum, step_start, &rec));
        *record = rec;
        if (observer_) DST_RETURN_IF_ERROR(observer_(rec));
        break;
      }
    }
  }
  if (program.empty() || program.back().op != Op::kRecordStep) {
    if (link_) DST_RETURN_IF_ERROR(link_->FinishSends());
    DST_RETURN_IF_ERROR(read_loss());
    DST_RETURN_IF_ERROR(Finish(batch, loss_sum, step_start, &rec));
    *record = rec;
  }
  return Status::Ok();
}

}  // namespace dst
