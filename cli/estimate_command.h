// `dstrain estimate`: per-rank model-state memory of a config and model for
// each ZeRO stage at a given world size, computed without allocating — the
// same bytes a run of that layout measures.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace dstrain_cli {

class EstimateCommand {
 public:
  explicit EstimateCommand(CLI::App &parent);
  bool selected() const { return app_->parsed(); }
  int Run();

 private:
  CLI::App *app_;
  std::string config_path_, model_path_;
  int64_t world_size_ = 1;
  bool json_ = false;
};

}  // namespace dstrain_cli
