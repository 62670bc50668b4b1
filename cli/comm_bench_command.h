// `dstrain comm-bench`: the bandwidth of the job's collectives over message
// sizes, by nccl-tests' definitions (algbw, busbw), on the backend and layout
// a ds_config gives. Run it on every rank, e.g.
//   dstrain launch --nproc-per-node 4 -- dstrain comm-bench --group dp
// Rank 0 prints the table (or the JSON report).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace dstrain_cli {

class CommBenchCommand {
 public:
  explicit CommBenchCommand(CLI::App &parent);
  bool selected() const { return app_->parsed(); }
  int Run();

 private:
  CLI::App *app_;
  std::string config_path_;
  std::string group_ = "dp";
  std::string ops_ = "all";
  int64_t min_bytes_ = 4096;
  int64_t max_bytes_ = int64_t(64) << 20;
  int64_t factor_ = 4;
  int64_t iters_ = 0;
  int64_t warmup_ = 2;
  bool json_ = false;
};

}  // namespace dstrain_cli
