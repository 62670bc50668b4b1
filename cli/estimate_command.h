// `dstrain estimate`: per-rank memory of a config and model — model state for
// each ZeRO stage, activations, the pipeline's stages — at a given world
// size, computed without allocating: the same bytes a run of that layout
// measures. With --memory-per-rank it lists every (dp, tp, pp) of the world
// size and suggests one that fits.
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
  std::string memory_per_rank_;  // BYTES, or with a K/M/G/T (1000) or KiB/MiB/GiB/TiB suffix
  bool json_ = false;
};

}  // namespace dstrain_cli
