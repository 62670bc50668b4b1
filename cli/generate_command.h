// `dstrain generate` continues a prompt with a trained model, streaming the
// tokens as they come; `dstrain eval` prints a model's loss and perplexity
// on a data file. Both open the model with dst_generator_create: a dstrain
// checkpoint of any layout (--load) or a Hugging Face model directory
// (--model). Without a tokenizer, text is byte-level (each byte one token,
// as `dstrain train --data TEXT` trains on).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace dstrain_cli {

// The options that name and open a model for inference.
struct GeneratorSource {
  std::string load, tag, model, precision = "fp32";
  int64_t context = 0;
  int threads = 0;
  void AddTo(CLI::App *app);
};

class GenerateCommand {
 public:
  explicit GenerateCommand(CLI::App &parent);
  bool selected() const { return app_->parsed(); }
  int Run();

 private:
  CLI::App *app_;
  GeneratorSource source_;
  std::string prompt_, prompt_tokens_, tokenizer_;
  int64_t max_new_tokens_ = 64, top_k_ = 0;
  double temperature_ = 1.0, top_p_ = 1.0;
  uint64_t seed_ = 0;
  bool no_cache_ = false, ignore_eos_ = false, print_tokens_ = false;
};

class EvalCommand {
 public:
  explicit EvalCommand(CLI::App &parent);
  bool selected() const { return app_->parsed(); }
  int Run();

 private:
  CLI::App *app_;
  GeneratorSource source_;
  std::string data_, split_ = "all", tokenizer_;
  int64_t seq_len_ = 0, batch_ = 1, max_batches_ = 0;
  bool json_ = false;
};

}  // namespace dstrain_cli
