// `dstrain ckpt inspect DIR [--tag T] [--json]` prints what a checkpoint holds
// (step, layout it was saved from, files verified against their checksums,
// tensors, optimizer shards); `dstrain ckpt export DIR [--tag T] --out F`
// writes its consolidated fp32 weights as one safetensors file.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace dstrain_cli {

class CkptCommand {
 public:
  explicit CkptCommand(CLI::App &parent);
  bool selected() const { return app_->parsed(); }
  int Run();

 private:
  int Inspect();
  int Export();

  CLI::App *app_, *inspect_, *export_;
  std::string dir_, tag_, out_;
  std::string format_ = "safetensors", dtype_ = "fp32", max_shard_size_ = "5GB";
  bool json_ = false;
};

}  // namespace dstrain_cli
