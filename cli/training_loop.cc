#include "training_loop.h"

#include <chrono>
#include <cstdio>

#include "interrupt.h"

namespace dstrain_cli {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs the plan step by step, keeping the numbers the display and summary need.
class TrainingLoop {
 public:
  TrainingLoop(Trainer &trainer, const LoopPlan &plan, Progress &progress)
      : trainer_(trainer), plan_(plan), progress_(progress) {
    result_.start_step = result_.end_step = plan.start_step;
    result_.rate_unit = state_.rate_unit = trainer.rate_unit();
    state_.step = plan.start_step;
    state_.total_steps = plan.total_steps;
  }

  LoopResult Run() {
    PrintMemoryStatus(plan_.start_step);
    Evaluate();
    steps_start_ = Clock::now();
    for (int64_t step = plan_.start_step; step < plan_.total_steps; ++step) {
      if (InterruptRequested()) {
        result_.interrupted = true;
        break;
      }
      Train(step);
      const int64_t done = step + 1;
      if (plan_.memory_status_interval > 0 && done % plan_.memory_status_interval == 0)
        PrintMemoryStatus(done);
      if (done % plan_.eval_interval == 0 || done == plan_.total_steps) Evaluate();
      if (IsSaveStep(done)) Save();
    }
    if (TrainedUnsavedSteps()) Save();
    progress_.Finish();
    result_.total_seconds = SecondsSince(start_);
    return result_;
  }

 private:
  void Train(int64_t step) {
    state_.learning_rate = trainer_.LearningRate();
    const Clock::time_point step_start = Clock::now();
    const double loss = trainer_.TrainStep(step);
    result_.train_seconds += SecondsSince(step_start);
    result_.train_tokens += static_cast<int64_t>(trainer_.tokens_per_step());
    result_.end_step = step + 1;
    result_.last_train_loss = loss;
    if (const auto scale = trainer_.LossScale()) {
      state_.loss_scale = scale->scale;
      state_.skipped_steps = scale->skipped_steps;
    }
    UpdateState(loss);
    progress_.OnStep(state_);
  }

  void PrintMemoryStatus(int64_t step) {
    if (plan_.memory_status_interval <= 0) return;
    std::printf("\nstep %lld %s\n", static_cast<long long>(step),
                trainer_.MemoryStatusLine().c_str());
    std::fflush(stdout);
  }

  void UpdateState(double loss) {
    state_.step = result_.end_step;
    state_.loss = loss;
    state_.tokens_per_second =
        result_.train_seconds > 0 ? result_.train_tokens / result_.train_seconds : 0.0;
    const int64_t steps_done = result_.end_step - plan_.start_step;
    const int64_t steps_left = plan_.total_steps - result_.end_step;
    state_.eta_seconds = SecondsSince(steps_start_) / static_cast<double>(steps_done) * steps_left;
  }

  void Evaluate() {
    const ValPoint point{result_.end_step, trainer_.Evaluate()};
    if (!result_.first_val) result_.first_val = point;
    result_.last_val = point;
    state_.val_loss = point.loss;
    progress_.OnEval(state_);
  }

  bool IsSaveStep(int64_t done) const {
    return !plan_.save_dir.empty() && plan_.save_interval > 0 && done % plan_.save_interval == 0;
  }

  bool TrainedUnsavedSteps() const {
    return !plan_.save_dir.empty() && result_.end_step > plan_.start_step &&
           last_saved_step_ != result_.end_step;
  }

  void Save() {
    result_.checkpoint = trainer_.SaveCheckpoint(plan_.save_dir, plan_.data_seed);
    last_saved_step_ = result_.end_step;
  }

  Trainer &trainer_;
  const LoopPlan &plan_;
  Progress &progress_;
  LoopResult result_;
  ProgressState state_;
  int64_t last_saved_step_ = -1;
  Clock::time_point start_ = Clock::now();
  Clock::time_point steps_start_ = start_;  // after the first evaluation, for the ETA
};

}  // namespace

LoopResult RunTrainingLoop(Trainer &trainer, const LoopPlan &plan, Progress &progress) {
  return TrainingLoop(trainer, plan, progress).Run();
}

}  // namespace dstrain_cli
