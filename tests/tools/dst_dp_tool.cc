// dst_dp_tool: trains a model for N steps on the default corpus (or --data)
// as one rank of a job (RANK/WORLD_SIZE/... from the environment, or a single
// process), taking this rank's slice of every global batch, and prints one
// JSON line: {"rank", "world_size", "losses", "memory", "num_parameters"}.
// The parallel-equivalence tests compare its output across layouts.
// Usage: dst_dp_tool --model M.json --config C.json [--steps N] [--data FILE]
//                    [--progress 1]   (print "step K" to stderr after each step)
#include <dstrain/dstrain.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void Check(dst_status_t status, const char *what) {
  if (status == DST_OK) return;
  std::fprintf(stderr, "dst_dp_tool: %s failed (%s): %s\n", what, dst_status_string(status),
               dst_last_error());
  std::exit(1);
}

}  // namespace

int main(int argc, char **argv) {
  std::string model, config, data;
  int steps = 20;
  bool progress = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--model") model = argv[i + 1];
    else if (flag == "--config") config = argv[i + 1];
    else if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    else if (flag == "--data") data = argv[i + 1];
    else if (flag == "--progress") progress = std::atoi(argv[i + 1]) != 0;
    else {
      std::fprintf(stderr, "dst_dp_tool: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.model_path = model.c_str();
  opts.config_path = config.c_str();
  opts.total_steps = steps;
  dst_engine_t *engine = nullptr;
  Check(dst_engine_create(&engine, &opts), "dst_engine_create");
  dst_engine_info_t info;
  info.struct_size = sizeof info;
  Check(dst_engine_get_info(engine, &info), "dst_engine_get_info");
  dst_dataset_t *dataset = nullptr;
  Check(dst_dataset_open_text(&dataset, data.empty() ? nullptr : data.c_str(), 0.1, 7),
        "dst_dataset_open_text");

  const size_t n = size_t(info.micro_batch_size * info.grad_accum_steps);
  const size_t T = size_t(info.seq_len);
  std::vector<int32_t> tokens(n * T), targets(n * T);
  std::string losses;
  for (int step = 0; step < steps; ++step) {
    Check(dst_dataset_batch(dataset, DST_SPLIT_TRAIN, uint64_t(step), uint64_t(info.rank) * n, n,
                            T, tokens.data(), targets.data(), tokens.size()),
          "dst_dataset_batch");
    dst_batch_t batch;
    dst_batch_default(&batch);
    batch.n_samples = n;
    batch.seq_len = T;
    batch.tokens = tokens.data();
    batch.tokens_count = tokens.size();
    batch.targets = targets.data();
    batch.targets_count = targets.size();
    float loss = 0;
    Check(dst_engine_train_batch(engine, &batch, &loss), "dst_engine_train_batch");
    if (progress) {
      std::fprintf(stderr, "step %d\n", step);
      std::fflush(stderr);
    }
    char text[64];
    std::snprintf(text, sizeof text, "%s%.9g", step ? "," : "", double(loss));
    losses += text;
  }
  const char *metrics = nullptr;
  Check(dst_engine_metrics_json(engine, &metrics), "dst_engine_metrics_json");
  std::printf("{\"rank\":%lld,\"world_size\":%lld,\"losses\":[%s],\"metrics\":%s}\n",
              static_cast<long long>(info.rank), static_cast<long long>(info.world_size),
              losses.c_str(), metrics);
  dst_dataset_destroy(dataset);
  dst_engine_destroy(engine);
  return 0;
}
