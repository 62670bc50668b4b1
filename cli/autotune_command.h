// `dstrain autotune` (and `dstrain launch --autotuning tune|run`): DeepSpeed's
// autotuner. Reads the config's autotuning section, prunes the space with
// `dstrain estimate`'s exact memory, runs short real trials — each a
// `dstrain launch` of `dstrain train` or of the user's own program with the
// trial's ds_config, measured by the engine's autotuning metric file — and
// writes every trial's result and the best ds_config to results_dir. A trial
// that fails is reported and skipped, never fatal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dstrain_cli {

struct AutotuneOptions {
  std::string config_path;
  std::string model_path;       // `dstrain train`'s --model ("" = built-in)
  std::string data_path;        // `dstrain train`'s --data ("" = default corpus)
  int64_t world_size = 0;       // ranks of each trial on one node (0: 1, or the hostfile's)
  std::string memory_per_rank;  // budget; "" = available memory / world size
  int64_t master_port = 29600;  // trial k uses master_port + k
  int64_t trial_timeout = 600;  // seconds before a trial without a metric is stopped
  // The program each trial runs (its ds_config argument is replaced); empty:
  // `dstrain train`.
  std::vector<std::string> program;
  std::string hostfile;     // DeepSpeed's "HOST slots=N" lines: trials span the hosts
  std::string master_addr;  // the first host's address ("" = its hostfile name)
  std::string remote;       // runs a launcher on another host ("" = ssh -o BatchMode=yes {host})
};

// What tuning found: the best ds_config (written to results_dir) and the
// program that trains with it (its arguments set as for the trials).
struct AutotuneResult {
  std::string config_path;
  std::vector<std::string> program;
};
// Tunes, or throws a CliError (no trial measured, bad config, interrupted).
AutotuneResult Autotune(const AutotuneOptions &options);

// The program's arguments with its ds_config argument (--deepspeed_config,
// --deepspeed_config=, --config, --config=, or the literal {config}) set to
// `config`, and each arg_mappings argument set to the value of its key.
std::vector<std::string> WithTrialArguments(
    std::vector<std::string> program, const std::string &config,
    const std::vector<std::pair<std::string, std::string>> &mapped_values);

// The ds_config path named in a program's arguments ("" when none is).
std::string ConfigArgument(const std::vector<std::string> &program);

class AutotuneCommand {
 public:
  explicit AutotuneCommand(CLI::App &parent);
  bool selected() const { return app_->parsed(); }
  void SetProgram(std::vector<std::string> program) { options_.program = std::move(program); }
  int Run();

 private:
  CLI::App *app_;
  AutotuneOptions options_;
};

}  // namespace dstrain_cli
