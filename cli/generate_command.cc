#include "generate_command.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cli_error.h"
#include "dstrain/dstrain.h"

namespace dstrain_cli {

namespace {

struct GeneratorDeleter {
  void operator()(dst_generator_t *g) const { dst_generator_destroy(g); }
};
using Generator = std::unique_ptr<dst_generator_t, GeneratorDeleter>;

using Clock = std::chrono::steady_clock;

struct TokenizerDeleter {
  void operator()(dst_tokenizer_t *t) const { dst_tokenizer_destroy(t); }
};
using TokenizerHandle = std::unique_ptr<dst_tokenizer_t, TokenizerDeleter>;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Generator Open(const GeneratorSource &s, int64_t batch) {
  if (s.load.empty() == s.model.empty())
    UsageError(
        "name the model: --load CHECKPOINT_DIR (a dstrain checkpoint) or --model PATH "
        "(a Hugging Face model directory or a model spec), one of them");
  dst_generator_options_t o;
  dst_generator_options_default(&o);
  if (!s.load.empty()) o.checkpoint_dir = s.load.c_str();
  if (!s.tag.empty()) o.checkpoint_tag = s.tag.c_str();
  if (!s.model.empty()) o.model_path = s.model.c_str();
  o.context = s.context;
  o.batch = batch;
  o.num_threads = s.threads;
  o.precision = s.precision.c_str();
  dst_generator_t *g = nullptr;
  Check(dst_generator_create(&g, &o), "opening the model");
  return Generator(g);
}

nlohmann::json Info(dst_generator_t *g) {
  const char *json = nullptr;
  Check(dst_generator_info_json(g, &json), "reading the model's description");
  return nlohmann::json::parse(json);
}

std::vector<int32_t> ParseTokenList(const std::string &text) {
  std::vector<int32_t> tokens;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const long value = std::stol(item, &used);
      if (item.find_first_not_of(" \t", used) != std::string::npos)
        throw std::invalid_argument(item);
      tokens.push_back(int32_t(value));
    } catch (const std::exception &) {
      UsageError("--prompt-tokens \"" + text + "\": expected token ids separated by commas");
    }
  }
  return tokens;
}

// A Hugging Face directory's tokenizer file, if it has one.
std::string TokenizerIn(const std::string &model) {
  std::error_code ec;
  if (model.empty() || !std::filesystem::is_directory(model, ec)) return "";
  for (const char *name : {"tokenizer.json", "tokenizer.model", "vocab.json"})
    if (std::filesystem::exists(std::filesystem::path(model) / name, ec)) return name;
  return "";
}

// The tokenizer --tokenizer names, or the one a model directory ships; null
// for byte-level text.
TokenizerHandle OpenTokenizer(const std::string &explicit_path, const std::string &model) {
  std::string path = explicit_path;
  if (path.empty() && !TokenizerIn(model).empty()) path = model;
  if (path.empty()) return nullptr;
  dst_tokenizer_t *t = nullptr;
  Check(dst_tokenizer_open(&t, path.c_str()), "opening the tokenizer");
  return TokenizerHandle(t);
}

std::vector<int32_t> Encode(dst_tokenizer_t *t, const std::string &text, bool add_special) {
  const int32_t *ids = nullptr;
  size_t n = 0;
  Check(dst_tokenizer_encode(t, text.data(), text.size(), add_special ? 1 : 0, &ids, &n),
        "tokenizing");
  return std::vector<int32_t>(ids, ids + n);
}

struct Streamed {
  bool tokens_only = false;
  dst_tokenizer_t *tokenizer = nullptr;
  std::vector<int32_t> ids;  // generated so far (a tokenizer's text is decoded from all of them)
  size_t printed = 0;        // bytes of that text already printed
  int64_t count = 0;
  Clock::time_point first;
};

// Prints the text the new token completes: the decoded text's new bytes,
// held back while it ends in an incomplete character (U+FFFD).
void PrintText(Streamed *s, bool final) {
  const char *text = nullptr;
  size_t n = 0;
  Check(dst_tokenizer_decode(s->tokenizer, s->ids.data(), s->ids.size(), &text, &n), "decoding");
  const std::string all(text, n);
  if (!final && all.size() >= 3 && all.compare(all.size() - 3, 3, "\xEF\xBF\xBD") == 0) return;
  if (all.size() > s->printed)
    std::fwrite(all.data() + s->printed, 1, all.size() - s->printed, stdout);
  s->printed = std::max(s->printed, all.size());
}

int PrintToken(void *user, int32_t token) {
  auto *s = static_cast<Streamed *>(user);
  if (s->count++ == 0) s->first = Clock::now();
  if (s->tokens_only) {
    std::printf("%s%d", s->count > 1 ? "," : "", token);
  } else if (s->tokenizer) {
    s->ids.push_back(token);
    PrintText(s, false);
  } else if (token < 256) {
    std::fputc(token, stdout);
  } else {
    std::printf("<%d>", token);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

void GeneratorSource::AddTo(CLI::App *app) {
  app->add_option("--load", load, "a dstrain checkpoint directory (any training layout)");
  app->add_option("--tag", tag, "its tag (default: the one DIR/latest names)");
  app->add_option("--model", model,
                  "a Hugging Face model directory (config.json + safetensors), or a model spec "
                  "file (its seeded initial weights)");
  app->add_option("--context", context,
                  "positions a sequence may fill, prompt included (default: the model's)");
  app->add_option("--threads", threads, "CPU threads (default: the cores)");
  app->add_option("--precision", precision, "fp32 or bf16 (weights and GEMMs in bf16)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
}

GenerateCommand::GenerateCommand(CLI::App &parent) {
  app_ = parent.add_subcommand("generate", "Continue a prompt with a trained model");
  source_.AddTo(app_);
  app_->add_option("--prompt", prompt_, "the prompt's text (byte-level tokens)");
  app_->add_option("--prompt-tokens", prompt_tokens_, "the prompt as token ids: 1,2,3");
  app_->add_option("--tokenizer", tokenizer_, "a tokenizer file (tokenizer.json, tokenizer.model)");
  app_->add_option("--max-new-tokens", max_new_tokens_, "tokens to generate at most (default 64)");
  app_->add_option("--temperature", temperature_, "sampling temperature; 0: greedy (default 1)");
  app_->add_option("--top-k", top_k_, "sample among the k most likely tokens (0: all)");
  app_->add_option("--top-p", top_p_, "sample among the most likely tokens reaching p (1: all)");
  app_->add_option("--seed", seed_, "the sampling seed (the same seed, the same text)");
  app_->add_flag("--no-cache", no_cache_,
                 "run the whole sequence forward for every token (no key/value cache)");
  app_->add_flag("--ignore-eos", ignore_eos_, "keep going past the model's end-of-sequence token");
  app_->add_flag("--tokens", print_tokens_, "print token ids instead of text");
}

int GenerateCommand::Run() {
  if (prompt_.empty() == prompt_tokens_.empty())
    UsageError("give the prompt: --prompt TEXT or --prompt-tokens IDS, one of them");
  Generator g = Open(source_, 1);
  TokenizerHandle tokenizer = OpenTokenizer(tokenizer_, source_.model);
  const nlohmann::json info = Info(g.get());
  const int64_t vocab = info["vocab_size"].get<int64_t>();
  std::vector<int32_t> prompt;
  if (!prompt_tokens_.empty()) {
    prompt = ParseTokenList(prompt_tokens_);
  } else if (tokenizer) {
    prompt = Encode(tokenizer.get(), prompt_, true);
    if (prompt.empty()) UsageError("the prompt tokenizes to no tokens; give some text");
  } else {
    if (vocab < 256)
      UsageError("the model's vocabulary has " + std::to_string(vocab) +
                 " tokens, fewer than the 256 of byte-level text; pass --prompt-tokens IDS");
    for (unsigned char c : prompt_) prompt.push_back(int32_t(c));
  }
  dst_sampling_t s;
  dst_sampling_default(&s);
  s.max_new_tokens = max_new_tokens_;
  s.temperature = temperature_;
  s.top_k = top_k_;
  s.top_p = top_p_;
  s.seed = seed_;
  s.use_cache = no_cache_ ? 0 : 1;
  s.stop_at_eos = ignore_eos_ ? 0 : 1;
  Streamed streamed;
  streamed.tokens_only = print_tokens_;
  streamed.tokenizer = tokenizer.get();
  if (!print_tokens_) {
    std::fwrite(prompt_.data(), 1, prompt_.size(), stdout);
    std::fflush(stdout);
  }
  const char *stop = "length";
  size_t count = 0;
  const Clock::time_point start = Clock::now();
  Check(dst_generator_generate(g.get(), prompt.data(), prompt.size(), &s, PrintToken, &streamed,
                               nullptr, 0, &count, &stop),
        "generating");
  const Clock::time_point end = Clock::now();
  if (streamed.tokenizer && !print_tokens_) PrintText(&streamed, true);
  std::printf("\n");
  std::fflush(stdout);
  // The first token waits for the prompt's forward; the rest are decode steps.
  const double first = count > 0 ? Seconds(start, streamed.first) : Seconds(start, end);
  const double rest = count > 1 ? Seconds(streamed.first, end) : 0.0;
  std::fprintf(stderr,
               "dstrain: %zu tokens (stopped: %s); prompt of %zu tokens + first token %.3f s, "
               "then %.1f tokens/s%s\n",
               count, stop, prompt.size(), first, rest > 0 ? double(count - 1) / rest : 0.0,
               no_cache_ ? " (no cache)" : "");
  return kExitOk;
}

EvalCommand::EvalCommand(CLI::App &parent) {
  app_ = parent.add_subcommand("eval", "Print a model's loss and perplexity on a data file");
  source_.AddTo(app_);
  app_->add_option("--data", data_,
                   "a text file (byte-level tokens) or a token file (.bin: llm.c's uint16)")
      ->required();
  app_->add_option("--tokenizer", tokenizer_,
                   "tokenize a text file with this (default: the model directory's, if any; "
                   "else byte-level)");
  app_->add_option("--split", split_, "all (default), or the file's val / train split (90/10)")
      ->check(CLI::IsMember({"all", "val", "train"}));
  app_->add_option("--seq-len", seq_len_, "tokens per window (default: the context)");
  app_->add_option("--batch", batch_, "windows per forward (default 1)");
  app_->add_option("--max-batches", max_batches_,
                   "stop after this many forwards (0: the whole data)");
  app_->add_flag("--json", json_, "print the figures as JSON");
}

int EvalCommand::Run() {
  if (batch_ < 1) UsageError("--batch must be at least 1");
  Generator g = Open(source_, batch_);
  const nlohmann::json info = Info(g.get());
  const int64_t context = info["context"].get<int64_t>();
  const int64_t T = seq_len_ > 0 ? seq_len_ : context;
  if (T > context)
    UsageError("--seq-len " + std::to_string(T) + " exceeds the model's context of " +
               std::to_string(context));
  const bool token_file = data_.size() > 4 && data_.compare(data_.size() - 4, 4, ".bin") == 0;
  TokenizerHandle tokenizer = token_file ? nullptr : OpenTokenizer(tokenizer_, source_.model);
  std::vector<int32_t> stream;
  if (tokenizer) {  // the text through the model's tokenizer; the last 10% is "val"
    std::ifstream in(data_, std::ios::binary);
    if (!in) throw CliError(kExitFailure, "cannot read " + data_);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    stream = Encode(tokenizer.get(), text, false);
    const size_t train = stream.size() - stream.size() / 10;
    if (split_ == "val") stream.erase(stream.begin(), stream.begin() + long(train));
    if (split_ == "train") stream.resize(train);
  } else {
    dst_dataset_t *raw = nullptr;
    Check(token_file ? dst_dataset_open_tokens(&raw, data_.c_str(), 0.1, 0)
                     : dst_dataset_open_text(&raw, data_.c_str(), 0.1, 0),
          "opening " + data_);
    std::unique_ptr<dst_dataset_t, void (*)(dst_dataset_t *)> dataset(raw, dst_dataset_destroy);
    // The data as one stream (the train split then the validation split is the file).
    for (dst_split_t split : {DST_SPLIT_TRAIN, DST_SPLIT_VAL}) {
      if ((split == DST_SPLIT_TRAIN && split_ == "val") ||
          (split == DST_SPLIT_VAL && split_ == "train"))
        continue;
      size_t n = 0;
      Check(dst_dataset_num_tokens(dataset.get(), split, &n), "reading " + data_);
      const size_t at = stream.size();
      stream.resize(at + n);
      Check(dst_dataset_read(dataset.get(), split, 0, stream.data() + at, n), "reading " + data_);
    }
  }
  int64_t max_token = 0;
  for (int32_t t : stream) max_token = std::max<int64_t>(max_token, t);
  if (max_token >= info["vocab_size"].get<int64_t>())
    throw CliError(kExitUsage, data_ + " holds token " + std::to_string(max_token) +
                                   ", outside the model's vocabulary of " +
                                   info["vocab_size"].dump());
  // Windows of T tokens with the next token as each one's target, side by
  // side (the last token of one window is the first of the next's targets).
  const int64_t windows = stream.size() > 1 ? int64_t((stream.size() - 1) / size_t(T)) : 0;
  if (windows == 0)
    UsageError(data_ + " holds " + std::to_string(stream.size()) + " tokens, fewer than one " +
               "window of --seq-len " + std::to_string(T) + " + 1");
  double loss_sum = 0;
  int64_t counted = 0, batches = 0;
  std::vector<int32_t> tokens, targets;
  const Clock::time_point start = Clock::now();
  for (int64_t w = 0; w < windows; w += batch_) {
    if (max_batches_ > 0 && batches == max_batches_) break;
    const int64_t B = std::min(batch_, windows - w);
    tokens.resize(size_t(B * T));
    targets.resize(size_t(B * T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const size_t at = size_t((w + b) * T + t);
        tokens[size_t(b * T + t)] = stream[at];
        targets[size_t(b * T + t)] = stream[at + 1];
      }
    double loss = 0;
    int64_t n = 0;
    Check(
        dst_generator_loss(g.get(), tokens.data(), targets.data(), size_t(B), size_t(T), &loss, &n),
        "evaluating");
    loss_sum += loss * double(n);
    counted += n;
    ++batches;
  }
  const double seconds = Seconds(start, Clock::now());
  const double loss = loss_sum / double(counted);
  if (json_) {
    nlohmann::json out = {{"loss", loss},      {"perplexity", std::exp(loss)},
                          {"tokens", counted}, {"windows", std::min(windows, batches * batch_)},
                          {"seq_len", T},      {"seconds", seconds},
                          {"data", data_},     {"split", split_}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf(
        "loss %.6f  perplexity %.4f  (%lld tokens in %lld windows of %lld, %s split, "
        "%.1f s)\n",
        loss, std::exp(loss), (long long)counted, (long long)std::min(windows, batches * batch_),
        (long long)T, split_.c_str(), seconds);
  }
  return kExitOk;
}

}  // namespace dstrain_cli
