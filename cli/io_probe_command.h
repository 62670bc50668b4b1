// `dstrain io-probe DIR`: the sequential bandwidth of the file system under
// DIR through the NVMe offload tier's own I/O path, for a few aio block
// sizes and queue depths, and the "aio" settings to paste into ds_config.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace dstrain_cli {

class IoProbeCommand {
 public:
  explicit IoProbeCommand(CLI::App &parent);
  bool selected() const { return app_->parsed(); }
  int Run();

 private:
  CLI::App *app_;
  std::string dir_;
  int64_t size_ = 0;
  bool json_ = false;
};

}  // namespace dstrain_cli
