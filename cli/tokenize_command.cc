#include "tokenize_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_error.h"
#include "dstrain/dstrain.h"

namespace dstrain_cli {

namespace {

struct Bar {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last;
  bool tty = ::isatty(STDERR_FILENO) != 0;
};

void ShowProgress(void *user, int64_t done, int64_t total) {
  auto *bar = static_cast<Bar *>(user);
  const auto now = std::chrono::steady_clock::now();
  if (done < total && now - bar->last < std::chrono::milliseconds(bar->tty ? 200 : 5000)) return;
  bar->last = now;
  const double seconds = std::chrono::duration<double>(now - bar->start).count();
  const int width = 30, filled = total > 0 ? int(done * width / total) : width;
  std::fprintf(stderr, "%s[%s%s] %6.1f / %.1f MB  %5.1f MB/s%s", bar->tty ? "\r" : "",
               std::string(size_t(filled), '#').c_str(),
               std::string(size_t(width - filled), '.').c_str(), double(done) / 1e6,
               double(total) / 1e6, seconds > 0 ? double(done) / 1e6 / seconds : 0.0,
               bar->tty ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace

TokenizeCommand::TokenizeCommand(CLI::App &parent) {
  app_ = parent.add_subcommand("tokenize", "Tokenize text files into a token file for --data");
  app_->add_option("--tokenizer", tokenizer_,
                   "tokenizer.model (SentencePiece), tokenizer.json, vocab.json, or a directory")
      ->required();
  app_->add_option("--out", out_, "the training token file (llm.c's .bin format)")->required();
  app_->add_option("--val-out", val_out_, "a validation token file: each file's tail goes there");
  app_->add_option("--val-fraction", val_fraction_, "each file's share for --val-out (0.05)");
  app_->add_option("--threads", threads_, "tokenizing threads (default: the cores)");
  app_->add_option("--chunk-bytes", chunk_bytes_, "text per task (default 16 KiB)");
  app_->add_flag("--no-eos", no_eos_, "no end-of-sequence id after each file");
  app_->add_flag("--add-special", add_special_, "the tokenizer's additions (BOS) before each file");
  app_->add_flag("--quiet", quiet_, "no progress bar");
  app_->add_flag("--json", json_, "print the report as JSON");
  app_->add_option("files", files_, "text files")->required();
}

int TokenizeCommand::Run() {
  dst_tokenizer_t *raw = nullptr;
  Check(dst_tokenizer_open(&raw, tokenizer_.c_str()), "opening the tokenizer");
  std::unique_ptr<dst_tokenizer_t, void (*)(dst_tokenizer_t *)> tok(raw, dst_tokenizer_destroy);
  dst_tokenize_options_t o;
  dst_tokenize_options_default(&o);
  o.num_threads = threads_;
  o.val_fraction = val_fraction_;
  o.eos_after_files = no_eos_ ? 0 : 1;
  o.add_special = add_special_ ? 1 : 0;
  o.chunk_bytes = chunk_bytes_;
  std::vector<const char *> files;
  for (const std::string &f : files_) files.push_back(f.c_str());
  Bar bar;
  const char *report = nullptr;
  Check(dst_tokenize_files(tok.get(), files.data(), files.size(), out_.c_str(),
                           val_out_.empty() ? nullptr : val_out_.c_str(), &o,
                           quiet_ ? nullptr : ShowProgress, &bar, &report),
        "tokenizing");
  if (!quiet_ && bar.tty) std::fprintf(stderr, "\n");
  const nlohmann::json r = nlohmann::json::parse(report);
  if (json_) {
    std::printf("%s\n", r.dump(2).c_str());
    return kExitOk;
  }
  const double seconds = r["seconds"].get<double>();
  std::printf("%s: %lld tokens (uint%d)", out_.c_str(), (long long)r["train_tokens"].get<int64_t>(),
              r["version"].get<int>() == 1 ? 16 : 32);
  if (!val_out_.empty())
    std::printf(", %s: %lld tokens", val_out_.c_str(), (long long)r["val_tokens"].get<int64_t>());
  std::printf("; %.1f MB in %.2f s (%.1f MB/s)\n", r["bytes"].get<double>() / 1e6, seconds,
              seconds > 0 ? r["bytes"].get<double>() / 1e6 / seconds : 0.0);
  return kExitOk;
}

}  // namespace dstrain_cli
