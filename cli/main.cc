// dstrain: the command-line front end of libdstrain (C ABI only).
#include <algorithm>
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

// Edit distance between two option names: insertions, deletions,
// substitutions and adjacent transpositions ("stpes" is one from "steps").
size_t Distance(const std::string &a, const std::string &b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1] ? 1 : 0)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// "--steps=3" -> "steps".
std::string OptionName(const std::string &arg) {
  const size_t equals = arg.find('=');
  return arg.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
}

// "stpes" -> "--steps": the command's long option nearest to an unknown one
// (at most one edit per three characters), or "" when none is that close.
std::string NearestOption(const CLI::App &command, const std::string &name) {
  std::string best;
  size_t best_distance = std::max<size_t>(1, name.size() / 3) + 1;
  for (const CLI::Option *option : command.get_options())
    for (const std::string &known : option->get_lnames()) {
      const size_t d = Distance(name, known);
      if (d < best_distance) best_distance = d, best = "--" + known;
    }
  return best;
}

// An unexpected argument: CLI11's message, and the nearest option of the
// command for each unknown --option.
int ExitForUnknownOptions(const CLI::App &app, const CLI::ParseError &error, int argc,
                          char **argv) {
  std::string message = std::string("dstrain: error: ") + error.what();
  const CLI::App *command = nullptr;
  for (const CLI::App *sub : app.get_subcommands({}))
    if (argc > 1 && sub->get_name() == argv[1]) command = sub;
  if (command != nullptr)
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--") break;
      if (arg.rfind("--", 0) != 0 || arg.size() < 3) continue;
      const std::string name = OptionName(arg);
      if (command->get_option_no_throw("--" + name) != nullptr) continue;
      if (const std::string nearest = NearestOption(*command, name); !nearest.empty())
        message += "\n--" + name + ": did you mean " + nearest + "?";
    }
  std::fprintf(stderr, "%s\n(see dstrain %s --help)\n", message.c_str(),
               command != nullptr ? command->get_name().c_str() : "");
  return dstrain_cli::kExitUsage;
}

// Each command's --help ends with an example (launch's footer has its own).
void AddExamples(CLI::App &app) {
  struct Example {
    std::vector<std::string> path;
    const char *text;
  };
  const Example examples[] = {
      {{"train"},
       "Examples:\n"
       "  dstrain train --config ds_config.json --data my.txt --steps 1000 --save ckpt\n"
       "  dstrain train --config ds_config.json --load ckpt --steps 2000   # resume\n"
       "  dstrain launch --nproc-per-node 2 -- dstrain train --config ds_config.json"},
      {{"estimate"},
       "Examples:\n"
       "  dstrain estimate --config ds_config.json --model model.json --world-size 8\n"
       "  dstrain estimate --model ./hf-model-dir --world-size 8 --memory-per-rank 16GiB"},
      {{"generate"},
       "Example:\n  dstrain generate --load ckpt --prompt \"Once upon a time\" --temperature 0.8"},
      {{"eval"}, "Example:\n  dstrain eval --load ckpt --data held_out.txt"},
      {{"tokenize"},
       "Example:\n  dstrain tokenize --tokenizer tokenizer.json --out train.bin --val-out val.bin "
       "corpus/*.txt"},
      {{"ckpt", "inspect"}, "Example:\n  dstrain ckpt inspect ckpt --tag global_step200"},
      {{"ckpt", "export"},
       "Example:\n  dstrain ckpt export ckpt --format hf --dtype bf16 --out ./hf-model-dir"},
      {{"io-probe"}, "Example:\n  dstrain io-probe /local_nvme   # before offload_optimizer: nvme"},
      {{"comm-bench"},
       "Example:\n  dstrain launch --nproc-per-node 2 -- dstrain comm-bench --ops allreduce"},
      {{"autotune"},
       "Example:\n  dstrain autotune --config ds_config.json --world-size 2 --data my.txt"},
      {{"report"}, "Example:\n  dstrain report --json > report.json   # attach it to a bug report"},
  };
  for (const Example &e : examples) {
    CLI::App *command = &app;
    for (const std::string &name : e.path) command = command->get_subcommand(name);
    command->footer(e.text);
  }
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
  AddExamples(app);

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
  } catch (const CLI::ExtrasError &error) {
    return ExitForUnknownOptions(app, error, parsed, argv);
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
