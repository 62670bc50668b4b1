// `dstrain train`: trains a model on a text file (or the default corpus)
// through the C ABI, showing progress and saving/loading checkpoints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "default_job.h"

namespace dstrain_cli {

struct TrainOptions {
  std::string config_path;  // empty: the built-in ds_config
  std::string model_path;   // empty: the built-in model
  std::string data_path;    // empty: the default corpus
  std::string labels_path;  // sequential models with --data INPUTS.npy
  double val_fraction = 0.1;
  int64_t steps = kDefaultSteps;
  int64_t seq_len = 0;  // 0: the model's n_ctx
  int64_t eval_interval = 50;
  int64_t eval_batches = 8;
  std::string save_dir;
  int64_t save_interval = 0;  // 0: save only at the end
  std::string load_dir;
  std::string load_tag;             // empty: the tag in DIR/latest
  std::optional<uint64_t> seed;     // data seed; unset: checkpoint's, else config's
  std::optional<int> metrics_port;  // serve metrics and the dashboard (dstrain.monitor.http)
  bool quiet = false;
  int64_t memory_status_interval = 0;  // --memory-status N
};

class TrainCommand {
 public:
  // Registers the `train` subcommand and its options on `parent`.
  explicit TrainCommand(CLI::App &parent);
  bool selected() const { return app_->parsed(); }
  // Runs the parsed command; returns the exit code or throws a CliError.
  int Run();

 private:
  CLI::App *app_;
  TrainOptions options_;
  uint64_t seed_ = 0;     // --seed, copied into options_.seed when given
  int metrics_port_ = 0;  // --metrics-port (used only when given)
};

}  // namespace dstrain_cli
