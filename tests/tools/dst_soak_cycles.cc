// Soak: one process creates an engine, trains two steps, saves a checkpoint
// every tenth cycle and destroys it, N times, cycling through ZeRO stages and
// precisions. After each cycle it prints what the process holds as a JSON
// line: {"cycle", "fds", "threads", "rss_bytes"}. Everything an engine takes
// must come back when it is destroyed, so after the first cycles (one-time
// caches: OpenBLAS, oneDNN's JIT, the tokenizer-free default corpus) these
// stay flat. Uses the C ABI only, as an embedding program would.
//
//   dst_soak_cycles CYCLES [CHECKPOINT_DIR]
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "dstrain/dstrain.h"

namespace {

int64_t OpenDescriptors() {
  int64_t n = 0;
  if (DIR *dir = opendir("/proc/self/fd")) {
    while (const dirent *e = readdir(dir))
      if (e->d_name[0] != '.') ++n;
    closedir(dir);
  }
  return n - 1;  // the directory stream's own
}

// A field of /proc/self/status ("Threads", "VmRSS": kB).
int64_t StatusField(const std::string &field) {
  std::ifstream in("/proc/self/status");
  const std::string prefix = field + ":";
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, prefix.size(), prefix) == 0)
      return std::atoll(line.c_str() + prefix.size());
  return -1;
}

bool Check(dst_status_t status, const char *doing) {
  if (status == DST_OK) return true;
  std::fprintf(stderr, "dst_soak_cycles: %s: %s\n", doing, dst_last_error());
  return false;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dst_soak_cycles CYCLES [CHECKPOINT_DIR]\n");
    return 2;
  }
  const int cycles = std::atoi(argv[1]);
  const std::string ckpt = argc > 2 ? argv[2] : "";
  static const char *kConfigs[] = {
      R"({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 0},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})",
      R"({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
          "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})",
      R"({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2},
          "fp16": {"enabled": true}, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}})",
      R"({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3},
          "activation_checkpointing": {"partition_activations": true},
          "optimizer": {"type": "Lamb", "params": {"lr": 1e-3}}})",
  };
  const char *model =
      R"({"type": "llama", "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 32})";
  enum { N = 4, T = 16 };
  std::vector<int32_t> tokens(N * T), targets(N * T);
  for (int i = 0; i < N * T; ++i) {
    tokens[i] = (i * 7) % 256;
    targets[i] = (i * 7 + 1) % 256;
  }
  dst_batch_t batch;
  dst_batch_default(&batch);
  batch.n_samples = N;
  batch.seq_len = T;
  batch.tokens = tokens.data();
  batch.tokens_count = N * T;
  batch.targets = targets.data();
  batch.targets_count = N * T;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    dst_engine_options_t options;
    dst_engine_options_default(&options);
    options.config_json = kConfigs[cycle % 4];
    options.model_json = model;
    dst_engine_t *engine = nullptr;
    if (!Check(dst_engine_create(&engine, &options), "creating an engine")) return 1;
    float loss = 0;
    for (int step = 0; step < 2; ++step)
      if (!Check(dst_engine_train_batch(engine, &batch, &loss), "training")) return 1;
    if (!ckpt.empty() && cycle % 10 == 9 &&
        !Check(dst_engine_save_checkpoint(engine, ckpt.c_str(), "soak", nullptr), "saving"))
      return 1;
    dst_engine_destroy(engine);
    std::printf(
        "{\"cycle\": %d, \"loss\": %.4f, \"fds\": %lld, \"threads\": %lld, "
        "\"rss_bytes\": %lld}\n",
        cycle, loss, static_cast<long long>(OpenDescriptors()),
        static_cast<long long>(StatusField("Threads")),
        static_cast<long long>(StatusField("VmRSS") * 1024));
    std::fflush(stdout);
  }
  return 0;
}
