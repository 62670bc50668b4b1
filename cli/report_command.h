// `dstrain report`: what this libdstrain was built with and what it sees, as a
// readable table (like DeepSpeed's ds_report) or, with --json, the raw JSON.
#pragma once

#include <CLI/CLI.hpp>

namespace dstrain_cli {

class ReportCommand {
 public:
  // Registers the `report` subcommand and its options on `parent`.
  explicit ReportCommand(CLI::App &parent);
  bool selected() const { return app_->parsed(); }
  // Prints the report; returns the exit code or throws a CliError.
  int Run();

 private:
  CLI::App *app_;
  bool json_ = false;
};

}  // namespace dstrain_cli
