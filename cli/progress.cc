#include "progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "format.h"

namespace dstrain_cli {
namespace {

constexpr int kBarWidth = 30;

std::string StepText(const ProgressState &state) {
  return "step " + std::to_string(state.step) + "/" + std::to_string(state.total_steps);
}

// "  loss 2.1340  val 2.2010  lr 8.1e-04  12.3k tok/s  ETA 0:42"; the plain
// log leaves out val, which it prints on lines of its own.
std::string StatusText(const ProgressState &state, bool with_val) {
  std::string text;
  if (state.loss) text += "  loss " + FormatLoss(*state.loss);
  if (with_val && state.val_loss) text += "  val " + FormatLoss(*state.val_loss);
  if (state.loss) {
    text += "  lr " + FormatLearningRate(state.learning_rate);
    text += "  " + FormatCount(state.tokens_per_second) + " " + state.rate_unit;
    if (state.loss_scale) {
      char scale[48];
      std::snprintf(scale, sizeof scale, "  scale %g", *state.loss_scale);
      text += scale;
      if (state.skipped_steps > 0) text += " (" + std::to_string(state.skipped_steps) + " skipped)";
    }
    text += "  ETA " + FormatDuration(state.eta_seconds);
  }
  return text;
}

std::string Bar(int64_t done, int64_t total) {
  const int64_t filled = total > 0 ? done * kBarWidth / total : kBarWidth;
  std::string bar = "[";
  for (int64_t i = 0; i < kBarWidth; ++i) bar += i < filled ? '#' : '.';
  return bar + "]";
}

// One line, redrawn in place after every step and evaluation.
class BarProgress : public Progress {
 public:
  ~BarProgress() override { Finish(); }
  void OnStep(const ProgressState &state) override { Draw(state); }
  void OnEval(const ProgressState &state) override { Draw(state); }
  void Finish() override {
    if (!drawn_) return;
    std::fputs("\n", stdout);
    std::fflush(stdout);
    drawn_ = false;
  }

 private:
  void Draw(const ProgressState &state) {
    const std::string line = Bar(state.step, state.total_steps) + " " + StepText(state) +
                             StatusText(state, /*with_val=*/true);
    std::printf("\r%s\x1b[K", line.c_str());  // \x1b[K clears the rest of the old line
    std::fflush(stdout);
    drawn_ = true;
  }

  bool drawn_ = false;
};

// A plain line every steps_per_print steps and after every evaluation.
class LineProgress : public Progress {
 public:
  explicit LineProgress(int64_t steps_per_print) : steps_per_print_(steps_per_print) {}

  void OnStep(const ProgressState &state) override {
    if (state.step % steps_per_print_ != 0 && state.step != state.total_steps) return;
    std::printf("%s%s\n", StepText(state).c_str(), StatusText(state, /*with_val=*/false).c_str());
    std::fflush(stdout);
  }
  void OnEval(const ProgressState &state) override {
    std::printf("%s  val loss %s\n", StepText(state).c_str(),
                FormatLoss(state.val_loss.value_or(0.0)).c_str());
    std::fflush(stdout);
  }

 private:
  int64_t steps_per_print_;
};

class QuietProgress : public Progress {
 public:
  void OnStep(const ProgressState &) override {}
  void OnEval(const ProgressState &) override {}
};

}  // namespace

ProgressStyle ChooseProgressStyle(bool quiet) {
  if (quiet) return ProgressStyle::kQuiet;
  return ::isatty(STDOUT_FILENO) ? ProgressStyle::kBar : ProgressStyle::kLines;
}

std::unique_ptr<Progress> MakeProgress(ProgressStyle style, int64_t steps_per_print) {
  switch (style) {
    case ProgressStyle::kBar:
      return std::make_unique<BarProgress>();
    case ProgressStyle::kLines:
      return std::make_unique<LineProgress>(steps_per_print > 0 ? steps_per_print : 10);
    case ProgressStyle::kQuiet:
      break;
  }
  return std::make_unique<QuietProgress>();
}

}  // namespace dstrain_cli
