// bench_gpt_dstrain: training throughput of dstrain through the C ABI, the
// dstrain half of bench/bench_gpt.py. Builds an engine from a model spec and
// a ds_config, runs warm-up steps, then times train_batch steps on random
// tokens and prints one JSON object on the last line of stdout.
//
// Usage: bench_gpt_dstrain --model MODEL.json --config CONFIG.json
//                          [--warmup W] [--steps S]
#include <dstrain/dstrain.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void Die(const std::string &what) {
  std::fprintf(stderr, "bench_gpt_dstrain: %s\n", what.c_str());
  std::exit(1);
}

void Check(dst_status_t status, const char *call) {
  if (status != DST_OK) {
    Die(std::string(call) + " failed (" + dst_status_string(status) + "): " + dst_last_error());
  }
}
#define CHECK_DST(call) Check((call), #call)

double Now() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char **argv) {
  std::string model_path, config_path;
  int warmup = 2, steps = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) Die("missing value after " + a);
    if (a == "--model") {
      model_path = argv[++i];
    } else if (a == "--config") {
      config_path = argv[++i];
    } else if (a == "--warmup") {
      warmup = std::atoi(argv[++i]);
    } else if (a == "--steps") {
      steps = std::atoi(argv[++i]);
    } else {
      Die("unknown argument " + a +
          "; usage: bench_gpt_dstrain --model M.json --config C.json [--warmup W] [--steps S]");
    }
  }
  if (model_path.empty() || config_path.empty() || steps < 1 || warmup < 0) {
    Die("usage: bench_gpt_dstrain --model M.json --config C.json [--warmup W] [--steps S]");
  }

  dst_engine_options_t options;
  dst_engine_options_default(&options);
  options.model_path = model_path.c_str();
  options.config_path = config_path.c_str();
  options.total_steps = warmup + steps;
  dst_engine_t *engine = nullptr;
  CHECK_DST(dst_engine_create(&engine, &options));
  dst_engine_info_t info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_DST(dst_engine_get_info(engine, &info));
  if (info.model_type != DST_MODEL_GPT) Die("a GPT model spec is expected");

  const size_t n_samples = static_cast<size_t>(info.micro_batch_size * info.grad_accum_steps);
  const size_t seq_len = static_cast<size_t>(info.seq_len);
  const size_t count = n_samples * seq_len;
  // Random tokens; targets are the next token, as in language modelling.
  std::vector<int32_t> stream(count + 1);
  uint64_t state = 0x243f6a8885a308d3ull;
  for (int32_t &t : stream) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(info.vocab_size));
  }
  std::vector<int32_t> tokens(stream.begin(), stream.end() - 1),
      targets(stream.begin() + 1, stream.end());
  dst_batch_t batch;
  dst_batch_default(&batch);
  batch.n_samples = n_samples;
  batch.seq_len = seq_len;
  batch.tokens = tokens.data();
  batch.tokens_count = count;
  batch.targets = targets.data();
  batch.targets_count = count;

  float loss = 0;
  double t0 = Now();
  for (int i = 0; i < warmup; ++i) CHECK_DST(dst_engine_train_batch(engine, &batch, &loss));
  const double warmup_seconds = Now() - t0;
  std::vector<double> step_seconds;
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    double s0 = Now();
    CHECK_DST(dst_engine_train_batch(engine, &batch, &loss));
    step_seconds.push_back(Now() - s0);
    losses.push_back(loss);
    std::fprintf(stderr, "step %d: %.3f s, loss %.4f\n", i + 1, step_seconds.back(), loss);
  }
  double total = 0, best = 1e30;
  for (double s : step_seconds) {
    total += s;
    best = best < s ? best : s;
  }
  const double tokens_per_step = static_cast<double>(count);
  const char *metrics = nullptr;
  CHECK_DST(dst_engine_metrics_json(engine, &metrics));
  std::printf(
      "{\"config\":\"%s\",\"n_samples\":%zu,\"seq_len\":%zu,\"steps\":%d,"
      "\"warmup_seconds\":%.4f,\"mean_step_seconds\":%.6f,\"best_step_seconds\":%.6f,"
      "\"tokens_per_s\":%.3f,\"first_loss\":%.6f,\"last_loss\":%.6f,\"metrics\":%s}\n",
      config_path.c_str(), n_samples, seq_len, steps, warmup_seconds, total / steps, best,
      tokens_per_step * steps / total, losses.front(), losses.back(), metrics);
  dst_engine_destroy(engine);
  return 0;
}
