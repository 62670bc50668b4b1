// `dstrain tokenize --tokenizer PATH --out train.bin [--val-out val.bin]
// FILES...` writes llm.c's token-file format (dst_tokenize_files) with a
// progress bar on stderr, and prints the token counts and throughput.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace dstrain_cli {

class TokenizeCommand {
 public:
  explicit TokenizeCommand(CLI::App &parent);
  bool selected() const { return app_->parsed(); }
  int Run();

 private:
  CLI::App *app_;
  std::string tokenizer_, out_, val_out_;
  std::vector<std::string> files_;
  double val_fraction_ = 0.05;
  int threads_ = 0;
  int64_t chunk_bytes_ = 16 << 10;
  bool no_eos_ = false, add_special_ = false, quiet_ = false, json_ = false;
};

}  // namespace dstrain_cli
