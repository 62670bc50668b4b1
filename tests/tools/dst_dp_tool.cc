// dst_dp_tool: trains a model for N steps on the default corpus (or --data; a
// sequential model on a built-in smooth regression task)
// as one rank of a job (RANK/WORLD_SIZE/... from the environment, or a single
// process), taking this rank's slice of every global batch, and prints one
// JSON line: {"rank", "world_size", "losses", "metrics"}.
// The parallel-equivalence tests compare its output across layouts.
// With --ckpt DIR --save-at K it saves a checkpoint after K steps; with --ckpt
// DIR --resume it loads DIR first and trains the steps that remain. The status
// of each ("save"/"load": {"status", "error"}) is in the JSON line; training
// goes on after a failed save. --inspect 1 adds per-tensor norms read with
// get_param/get_grad after a final forward_backward (see InspectJson).
// Usage: dst_dp_tool --model M.json --config C.json [--steps N] [--data FILE]
//                    [--ckpt DIR (--save-at K | --resume)] [--inspect 1]
//                    [--progress 1]   (print "step K" to stderr after each step)
//                    [--skip-save-rank R]  (rank R does not take part in the save)
//                    [--metrics 0]  (no metrics JSON: the line stays under 4 KiB)
//                    [--retry-failed N]  (a failed train_batch is retried N times)
//                    [--load-weights-at K]  (after K steps, dst_engine_load_weights
//                                            from --ckpt DIR: the weights only)
//                    [--set-param-at K]  (after K steps, dst_engine_set_param of
//                                         the first tensor: 0.05 sin(0.1 i), every rank)
#include <dstrain/dstrain.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// {"status": "...", "error": "..."} (quotes in the message become ').
std::string StatusJson(dst_status_t status) {
  std::string error = status == DST_OK ? "" : dst_last_error();
  for (char &c : error)
    if (c == '"' || c == '\\' || c == '\n') c = '\'';
  return std::string("{\"status\":\"") + dst_status_string(status) + "\",\"error\":\"" + error +
         "\"}";
}

dst_engine_t *g_engine = nullptr;

// On failure the engine is destroyed before exiting, as a well-behaved program
// does: rank 0 then keeps the rendezvous store up until the other ranks have
// left, so they can still learn which rank was lost.
void Check(dst_status_t status, const char *what) {
  if (status == DST_OK) return;
  std::fprintf(stderr, "dst_dp_tool: %s failed (%s): %s\n", what, dst_status_string(status),
               dst_last_error());
  dst_engine_destroy(g_engine);
  std::exit(1);
}

std::string NormsJson(const std::vector<double> &norms) {
  std::string out = "[";
  char text[32];
  for (size_t i = 0; i < norms.size(); ++i) {
    std::snprintf(text, sizeof text, "%s%.9g", i ? "," : "", norms[i]);
    out += text;
  }
  return out + "]";
}

// After training: whether get_grad works after a train_batch, then a
// forward_backward on `batch` and every tensor's L2 norm from get_param and
// get_grad (every rank asks for the same tensors in the same order, which
// ZeRO stage 3 gathers collectively).
std::string InspectJson(dst_engine_t *engine, const dst_batch_t &batch) {
  size_t count = 0;
  Check(dst_engine_param_count(engine, &count), "dst_engine_param_count");
  std::vector<dst_tensor_info_t> infos(count);
  for (size_t i = 0; i < count; ++i) {
    infos[i].struct_size = sizeof infos[i];
    Check(dst_engine_param_info(engine, i, &infos[i]), "dst_engine_param_info");
  }
  std::vector<float> data(size_t(infos.back().numel));
  std::string out =
      ",\"grad_after_step\":" +
      StatusJson(dst_engine_get_grad(engine, infos.back().name, data.data(), data.size()));
  float loss = 0;
  Check(dst_engine_forward_backward(engine, &batch, &loss), "dst_engine_forward_backward");
  std::vector<double> param_norms, grad_norms;
  for (const dst_tensor_info_t &info : infos) {
    data.resize(size_t(info.numel));
    for (int grad = 0; grad < 2; ++grad) {
      Check(grad ? dst_engine_get_grad(engine, info.name, data.data(), data.size())
                 : dst_engine_get_param(engine, info.name, data.data(), data.size()),
            grad ? "dst_engine_get_grad" : "dst_engine_get_param");
      double sum = 0;
      for (float v : data) sum += double(v) * double(v);
      (grad ? grad_norms : param_norms).push_back(std::sqrt(sum));
    }
  }
  return out + ",\"param_norms\":" + NormsJson(param_norms) +
         ",\"grad_norms\":" + NormsJson(grad_norms);
}

}  // namespace

int main(int argc, char **argv) {
  std::string model, config, data, ckpt;
  int steps = 20, save_at = -1, skip_save_rank = -1, load_weights_at = -1, set_param_at = -1;
  int sleep_rank = -1, sleep_at = -1, sleep_seconds = 0;  // --sleep RANK:STEP:SECONDS
  bool progress = false, resume = false, inspect = false;
  // --metrics 0: the line without the metrics JSON, under the 4 KiB a pipe
  // writes whole, for launchers that merge several ranks' output (srun,
  // mpirun, dstrain launch).
  bool with_metrics = true;
  // --retry-failed N: a train_batch that fails is reported on stderr and
  // retried up to N times (fault-injection tests: a failed step changed nothing).
  int retries = 0;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--resume") {
      resume = true;
      --i;  // takes no value
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "dst_dp_tool: %s needs a value\n", flag.c_str());
      return 2;
    }
    if (flag == "--model")
      model = argv[i + 1];
    else if (flag == "--config")
      config = argv[i + 1];
    else if (flag == "--ckpt")
      ckpt = argv[i + 1];
    else if (flag == "--save-at")
      save_at = std::atoi(argv[i + 1]);
    else if (flag == "--inspect")
      inspect = std::atoi(argv[i + 1]) != 0;
    else if (flag == "--steps")
      steps = std::atoi(argv[i + 1]);
    else if (flag == "--data")
      data = argv[i + 1];
    else if (flag == "--load-weights-at")
      load_weights_at = std::atoi(argv[i + 1]);
    else if (flag == "--set-param-at")
      set_param_at = std::atoi(argv[i + 1]);
    else if (flag == "--skip-save-rank")
      skip_save_rank = std::atoi(argv[i + 1]);
    else if (flag == "--retry-failed")
      retries = std::atoi(argv[i + 1]);
    else if (flag == "--metrics")
      with_metrics = std::atoi(argv[i + 1]) != 0;
    else if (flag == "--progress")
      progress = std::atoi(argv[i + 1]) != 0;
    else if (flag == "--sleep")  // user code that keeps one rank away between two steps
      std::sscanf(argv[i + 1], "%d:%d:%d", &sleep_rank, &sleep_at, &sleep_seconds);
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
  g_engine = engine;
  dst_engine_info_t info;
  info.struct_size = sizeof info;
  Check(dst_engine_get_info(engine, &info), "dst_engine_get_info");
  dst_dataset_t *dataset = nullptr;
  Check(dst_dataset_open_text(&dataset, data.empty() ? nullptr : data.c_str(), 0.1, 7),
        "dst_dataset_open_text");

  const size_t n = size_t(info.micro_batch_size * info.grad_accum_steps);
  const size_t T = size_t(info.seq_len);
  std::vector<int32_t> tokens(n * T), targets(n * T);
  std::string losses, extra_json;
  int first_step = 0;
  if (resume) {
    const dst_status_t loaded = dst_engine_load_checkpoint(engine, ckpt.c_str(), nullptr, nullptr);
    extra_json += ",\"load\":" + StatusJson(loaded);
  }
  {  // a loaded checkpoint, or dstrain.resume_from_swap, may have taken steps already
    int64_t done = 0;
    Check(dst_engine_step_count(engine, &done), "dst_engine_step_count");
    first_step = int(done);
  }
  dst_batch_t batch;
  dst_batch_default(&batch);
  batch.n_samples = n;
  const bool sequential = info.model_type == DST_MODEL_SEQUENTIAL;  // MSE regression
  std::vector<float> inputs(sequential ? n * size_t(info.input_dim) : 0);
  std::vector<float> labels(sequential ? n * size_t(info.output_dim) : 0);
  if (sequential) {
    batch.inputs = inputs.data(), batch.inputs_count = inputs.size();
    batch.labels = labels.data(), batch.labels_count = labels.size();
  } else {
    batch.seq_len = T;
    batch.tokens = tokens.data(), batch.tokens_count = tokens.size();
    batch.targets = targets.data(), batch.targets_count = targets.size();
  }
  auto load_batch = [&](int index) {
    if (sequential) {  // sample j of global batch `index`: a smooth function of (index, j)
      const size_t first = size_t(info.dp_rank) * n;
      for (size_t i = 0; i < inputs.size(); ++i)
        inputs[i] = float(
            std::sin(0.37 * double(index) + 0.11 * double(first * size_t(info.input_dim) + i)));
      for (size_t i = 0; i < labels.size(); ++i)
        labels[i] = float(
            std::cos(0.29 * double(index) + 0.07 * double(first * size_t(info.output_dim) + i)));
      return;
    }
    Check(dst_dataset_batch(dataset, DST_SPLIT_TRAIN, uint64_t(index), uint64_t(info.dp_rank) * n,
                            n, T, tokens.data(), targets.data(), tokens.size()),
          "dst_dataset_batch");
  };
  for (int step = first_step; step < steps; ++step) {
    if (info.rank == sleep_rank && step == sleep_at)
      std::this_thread::sleep_for(std::chrono::seconds(sleep_seconds));
    load_batch(step);
    float loss = 0;
    dst_status_t trained = dst_engine_train_batch(engine, &batch, &loss);
    for (int retry = 0; trained != DST_OK && retry < retries; ++retry) {
      std::fprintf(stderr, "dst_dp_tool: step %d failed (%s): %s; retrying\n", step,
                   dst_status_string(trained), dst_last_error());
      trained = dst_engine_train_batch(engine, &batch, &loss);
    }
    Check(trained, "dst_engine_train_batch");
    if (progress) {
      std::fprintf(stderr, "step %d\n", step);
      std::fflush(stderr);
    }
    char text[64];
    std::snprintf(text, sizeof text, "%s%.9g", step > first_step ? "," : "", double(loss));
    losses += text;
    if (step + 1 == save_at) {
      const std::string saved =
          info.rank == skip_save_rank
              ? std::string("{\"status\":\"skipped\",\"error\":\"\"}")
              : StatusJson(dst_engine_save_checkpoint(engine, ckpt.c_str(), nullptr, nullptr));
      std::fprintf(stderr, "save: %s\n", saved.c_str());  // before any later failure
      std::fflush(stderr);
      extra_json += ",\"save\":" + saved;
    }
    if (step + 1 == load_weights_at)
      extra_json +=
          ",\"load_weights\":" + StatusJson(dst_engine_load_weights(engine, ckpt.c_str(), nullptr));
    if (step + 1 == set_param_at) {
      dst_tensor_info_t first;
      first.struct_size = sizeof first;
      Check(dst_engine_param_info(engine, 0, &first), "dst_engine_param_info");
      std::vector<float> values(size_t(first.numel));
      for (size_t i = 0; i < values.size(); ++i) values[i] = 0.05f * std::sin(0.1f * float(i));
      extra_json += ",\"set_param\":" + StatusJson(dst_engine_set_param(
                                            engine, first.name, values.data(), values.size()));
    }
  }
  if (inspect) {
    load_batch(steps);
    extra_json += InspectJson(engine, batch);
  }
  const char *metrics = "null";
  if (with_metrics) Check(dst_engine_metrics_json(engine, &metrics), "dst_engine_metrics_json");
  std::printf("{\"rank\":%lld,\"world_size\":%lld,\"losses\":[%s],\"metrics\":%s%s}\n",
              static_cast<long long>(info.rank), static_cast<long long>(info.world_size),
              losses.c_str(), metrics, extra_json.c_str());
  dst_dataset_destroy(dataset);
  g_engine = nullptr;
  dst_engine_destroy(engine);
  return 0;
}
