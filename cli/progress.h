// How `dstrain train` shows its progress: a redrawn bar on a terminal, one
// plain line every steps_per_print steps otherwise, or nothing with --quiet.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

namespace dstrain_cli {

// What the display knows after a step or an evaluation.
struct ProgressState {
  int64_t step = 0;                 // optimizer steps done
  int64_t total_steps = 0;          // --steps
  std::optional<double> loss;       // training loss of the last step
  std::optional<double> val_loss;   // last validation loss
  double learning_rate = 0.0;       // the LR the last step used
  double tokens_per_second = 0.0;   // tokens (GPT) or samples (sequential) per second
  const char *rate_unit = "tok/s";  // "tok/s" or "samples/s"
  double eta_seconds = 0.0;
  std::optional<double> loss_scale;  // fp16 only
  int64_t skipped_steps = 0;         // fp16 steps skipped on overflow
};

enum class ProgressStyle { kBar, kLines, kQuiet };

class Progress {
 public:
  virtual ~Progress() = default;
  virtual void OnStep(const ProgressState &state) = 0;
  virtual void OnEval(const ProgressState &state) = 0;
  // Ends the display (the bar's line); calling it twice is harmless.
  virtual void Finish() {}
};

// kBar when stdout is a terminal, kLines otherwise; kQuiet when `quiet`.
ProgressStyle ChooseProgressStyle(bool quiet);

std::unique_ptr<Progress> MakeProgress(ProgressStyle style, int64_t steps_per_print);

}  // namespace dstrain_cli
