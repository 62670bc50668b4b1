// dstrain: the command-line front end of libdstrain (C ABI only).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "autotune_command.h"
#include "ckpt_command.h"
#include "cli_error.h"
#include "comm_bench_command.h"
#include "dstrain/dstrain.h"
#include "estimate_command.h"
#include "generate_command.h"
#include "io_probe_command.h"
#include "launch_command.h"
#include "report_command.h"
#include "tokenize_command.h"
#include "train_command.h"

namespace {

std::string VersionText() {
  return std::string("dstrain ") + DST_VERSION_STRING + " (libdstrain " + dst_version() + ")";
}

// CLI11 reports --help / --version as "errors" with exit code 0; real usage
// errors exit with 2.
int ExitForParseError(const CLI::App &app, const CLI::ParseError &error) {
  const int code = app.exit(error);
  return code == 0 ? dstrain_cli::kExitOk : dstrain_cli::kExitUsage;
}

// CLI11's usage errors in the same form as the command's own errors.
std::string UsageFailureMessage(const CLI::App *, const CLI::Error &error) {
  return std::string("dstrain: error: ") + error.what() + "\n(see dstrain --help)\n";
}

void PrintError(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "dstrain: error: %s\n", message.c_str());
}

}  // namespace

int main(int argc, char **argv) {
  CLI::App app{"dstrain: a distributed training engine driven by a DeepSpeed-style ds_config",
               "dstrain"};
  app.set_version_flag("--version", VersionText);
  app.require_subcommand(1);
  app.failure_message(UsageFailureMessage);  // before the subcommands, which copy it
  dstrain_cli::ReportCommand report(app);
  dstrain_cli::TrainCommand train(app);
  dstrain_cli::EstimateCommand estimate(app);
  dstrain_cli::LaunchCommand launch(app);
  dstrain_cli::CkptCommand ckpt(app);
  dstrain_cli::IoProbeCommand io_probe(app);
  dstrain_cli::CommBenchCommand comm_bench(app);
  dstrain_cli::GenerateCommand generate(app);
  dstrain_cli::EvalCommand eval(app);
  dstrain_cli::TokenizeCommand tokenize(app);
  dstrain_cli::AutotuneCommand autotune(app);

  // The launched program's arguments are not the launcher's to parse.
  int parsed = argc;
  if (argc > 1 && std::string(argv[1]) == "launch") {
    parsed = launch.ProgramStart(argc, argv);
    launch.SetProgram(std::vector<std::string>(argv + parsed, argv + argc));
    if (parsed > 2 && std::string(argv[parsed - 1]) == "--") --parsed;  // CLI11 needs no "--"
  }
  if (argc > 1 && std::string(argv[1]) == "autotune") {  // [-- PROGRAM ARGS]: the user's program
    for (int i = 2; i < argc; ++i)
      if (std::string(argv[i]) == "--") {
        autotune.SetProgram(std::vector<std::string>(argv + i + 1, argv + argc));
        parsed = i;
        break;
      }
  }
  try {
    app.parse(parsed, argv);
  } catch (const CLI::ParseError &error) {
    return ExitForParseError(app, error);
  }

  try {
    if (report.selected()) return report.Run();
    if (estimate.selected()) return estimate.Run();
    if (launch.selected()) return launch.Run();
    if (ckpt.selected()) return ckpt.Run();
    if (io_probe.selected()) return io_probe.Run();
    if (comm_bench.selected()) return comm_bench.Run();
    if (generate.selected()) return generate.Run();
    if (eval.selected()) return eval.Run();
    if (tokenize.selected()) return tokenize.Run();
    if (autotune.selected()) return autotune.Run();
    return train.Run();
  } catch (const dstrain_cli::CliError &error) {
    PrintError(error.what());
    return error.exit_code();
  } catch (const std::exception &error) {
    PrintError(error.what());
    return dstrain_cli::kExitFailure;
  }
}
