// Trainer: the calls one training step, one evaluation and one checkpoint save
// make on an engine and a dataset, with the batch buffers they share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dstrain/dstrain.h"

namespace dstrain_cli {

// The samples one rank feeds per call: n_samples windows of seq_len tokens.
struct BatchShape {
  size_t n_samples = 0;  // micro_batch_size * grad_accum_steps
  size_t seq_len = 0;
  int64_t rank = 0;  // the data-parallel rank (pipeline stages of one replica share it)
  int64_t dp_size = 1;

  // The one place where the rank enters the data arithmetic: data-parallel
  // rank r takes samples [r * n_samples, (r + 1) * n_samples) of every global batch.
  uint64_t first_sample() const { return static_cast<uint64_t>(rank) * n_samples; }
  size_t num_elements() const { return n_samples * seq_len; }
};

class BatchSource;

class Trainer {
 public:
  // Borrows `engine` and `batches`; both must outlive the Trainer. `dp_size`:
  // data-parallel ranks, each feeding its share of every global batch.
  Trainer(dst_engine_t *engine, BatchSource &batches, int64_t dp_size, int64_t eval_batches);

  // One optimizer step on training batch `step`: the batch index is the step
  // number, so a resumed run sees the data an uninterrupted one would.
  double TrainStep(int64_t step);
  // Mean validation loss over the fixed batches 0 .. eval_batches - 1.
  double Evaluate();
  // The learning rate the next step will use.
  double LearningRate() const;
  // Optimizer steps taken so far.
  int64_t StepCount() const;
  // One line of this rank's memory (dst_engine_memory_status), as DeepSpeed's
  // see_memory_usage prints it: each category now (peak), the process's
  // resident set now (peak), the machine's available memory.
  std::string MemoryStatusLine() const;
  // fp16 training: the loss scale now and the steps skipped on overflow;
  // nullopt for fp32/bf16 (no scale to show).
  struct LossScaleState {
    double scale = 1;
    int64_t skipped_steps = 0;
  };
  std::optional<LossScaleState> LossScale() const;
  // Saves DIR/global_stepN with the data position as client state; returns
  // the checkpoint's directory (DIR/<tag named in DIR/latest>).
  std::string SaveCheckpoint(const std::string &dir, uint64_t data_seed);

  // Tokens (GPT) or samples one optimizer step trains on across the job.
  size_t tokens_per_step() const;
  // How their rate is printed: "tok/s" or "samples/s".
  const char *rate_unit() const;

 private:
  dst_engine_t *engine_;
  BatchSource &batches_;
  int64_t dp_size_;
  int64_t eval_batches_;
  bool fp16_ = false;  // from the resolved config
};

// The checkpoint directory DIR/latest points at, or DIR when it cannot be read.
std::string LatestCheckpointPath(const std::string &dir);

}  // namespace dstrain_cli
