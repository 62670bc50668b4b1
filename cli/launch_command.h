// `dstrain launch`: starts this node's ranks of a multi-process job with
// torchrun's environment contract (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT) plus the job token
// DSTRAIN_JOB_TOKEN, and supervises them: signals are forwarded, the first
// rank to fail is reported and the others are stopped. It needs no engine;
// only --autotuning (autotune_command) estimates memory through the C ABI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dstrain_cli {

struct LaunchOptions {
  int64_t nproc_per_node = 1;
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  int64_t kill_timeout = 30;         // seconds between SIGTERM and SIGKILL
  std::vector<std::string> program;  // PROGRAM ARGS...
  std::string autotuning;            // --autotuning: "", "tune" or "run"
};

class LaunchCommand {
 public:
  // Registers the `launch` subcommand and its options on `parent`.
  explicit LaunchCommand(CLI::App &parent);
  bool selected() const { return app_->parsed(); }
  // `dstrain launch ...`: the index in argv where PROGRAM begins (after
  // "--", or the first argument that is neither an option nor an option's
  // value; argc when there is none). main parses only what comes before and
  // hands the rest over as written: parsed by CLI11, "[1,2]" would reach the
  // program as its list syntax, "1" "2".
  int ProgramStart(int argc, char **argv) const;
  void SetProgram(std::vector<std::string> program);
  // Runs the job; returns the launcher's exit code or throws a CliError
  // (usage errors).
  int Run();

 private:
  int Tune();

  CLI::App *app_;
  LaunchOptions options_;
};

}  // namespace dstrain_cli
