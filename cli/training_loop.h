// The step loop of `dstrain train`: train from start_step to total_steps,
// evaluate every eval_interval steps and at both ends, save every
// save_interval steps and at the end, stop early (after a save) on Ctrl-C.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "progress.h"
#include "trainer.h"

namespace dstrain_cli {

struct LoopPlan {
  int64_t start_step = 0;     // steps already taken (from a loaded checkpoint)
  int64_t total_steps = 0;    // --steps
  int64_t eval_interval = 0;  // > 0
  std::string save_dir;       // empty: no checkpoints
  int64_t save_interval = 0;  // 0: only at the end
  uint64_t data_seed = 0;     // stored in the checkpoint's client state
  // --memory-status N: print the memory line at the start and every N steps (0: never).
  int64_t memory_status_interval = 0;
};

// A validation loss and the step it was measured at.
struct ValPoint {
  int64_t step = 0;
  double loss = 0.0;
};

struct LoopResult {
  int64_t start_step = 0;
  int64_t end_step = 0;
  std::optional<double> last_train_loss;
  std::optional<ValPoint> first_val;
  std::optional<ValPoint> last_val;
  int64_t train_tokens = 0;         // tokens (GPT) or samples (sequential)
  const char *rate_unit = "tok/s";  // how their rate is printed
  double train_seconds = 0.0;       // wall time inside training steps
  double total_seconds = 0.0;       // wall time of the whole loop, evaluations included
  std::string checkpoint;           // where the last checkpoint went; empty if none
  bool interrupted = false;
};

LoopResult RunTrainingLoop(Trainer &trainer, const LoopPlan &plan, Progress &progress);

}  // namespace dstrain_cli
