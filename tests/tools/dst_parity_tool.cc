// dst_parity_tool: drives the engine through the C ABI only and dumps what the
// PyTorch parity test (tests/python/test_parity.py) compares against:
//
//   DIR/init.safetensors     every parameter before any step (F32)
//   DIR/batches.safetensors  I32 "tokens_K" / "targets_K", K = 0..N
//   DIR/grads.safetensors    gradients of forward_backward on batch 0 (F32)
//   DIR/final.safetensors    every parameter after the N training steps (F32)
//   DIR/result.json          {"loss0", "train_losses", "lrs", ...}
//   DIR/checkpoint/          with --save-checkpoint: dst_engine_save_checkpoint after training
//
// --init-noise S adds S * uniform(-1, 1) noise to every parameter (through
// dst_engine_set_param) before anything is dumped: the GPT-2 init keeps
// activations so small that, e.g., exact and tanh GELU are indistinguishable;
// larger weights make such differences visible.
//
// Usage: dst_parity_tool --model MODEL.json --config CONFIG.json --out DIR [--steps N]
//                        [--init-noise S] [--save-checkpoint]
#include <dstrain/dstrain.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void Die(const std::string &what) {
  std::fprintf(stderr, "dst_parity_tool: %s\n", what.c_str());
  std::exit(1);
}

void Check(dst_status_t status, const char *call) {
  if (status != DST_OK) {
    Die(std::string(call) + " failed (" + dst_status_string(status) + "): " + dst_last_error());
  }
}

#define CHECK_DST(call) Check((call), #call)

// One tensor for the hand-written safetensors file.
struct Tensor {
  std::string name;
  const char *dtype;  // "F32" or "I32"
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

std::string JsonString(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Header {name: {dtype, shape, data_offsets}} padded with spaces so the data
// starts 8-byte aligned, then the bytes in order.
void WriteSafetensors(const std::string &path, const std::vector<Tensor> &tensors) {
  std::string header = "{";
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor &t = tensors[i];
    if (i) header += ",";
    header += JsonString(t.name) + ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d) header += ",";
      header += std::to_string(t.shape[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(header.size() >> (8 * i));

  FILE *f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) Die("cannot open " + path + " for writing: " + std::strerror(errno));
  bool ok = std::fwrite(len, 1, 8, f) == 8 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const Tensor &t : tensors) {
    if (!ok) break;
    ok = t.bytes.empty() || std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size();
  }
  if (std::fclose(f) != 0) ok = false;
  if (!ok) Die("writing " + path + " failed: " + std::strerror(errno));
}

template <typename T>
std::vector<char> Bytes(const std::vector<T> &v) {
  std::vector<char> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Parameters (or their gradients) as safetensors tensors.
std::vector<Tensor> DumpParams(dst_engine_t *engine, bool grads) {
  size_t count = 0;
  CHECK_DST(dst_engine_param_count(engine, &count));
  std::vector<Tensor> out;
  for (size_t i = 0; i < count; ++i) {
    dst_tensor_info_t info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_DST(dst_engine_param_info(engine, i, &info));
    if (info.name == nullptr) Die("parameter " + std::to_string(i) + " has a NULL name");
    if (info.ndim < 0 || info.ndim > DST_MAX_DIMS) {
      Die(std::string("parameter ") + info.name + " has ndim " + std::to_string(info.ndim));
    }
    Tensor t{info.name, "F32", std::vector<int64_t>(info.shape, info.shape + info.ndim), {}};
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (numel != info.numel) {
      Die(std::string("parameter ") + info.name + ": numel " + std::to_string(info.numel) +
          " does not match its shape");
    }
    std::vector<float> data(static_cast<size_t>(numel));
    if (grads) {
      CHECK_DST(dst_engine_get_grad(engine, info.name, data.data(), data.size()));
    } else {
      CHECK_DST(dst_engine_get_param(engine, info.name, data.data(), data.size()));
    }
    t.bytes = Bytes(data);
    out.push_back(std::move(t));
  }
  return out;
}

// A 64-bit LCG (Knuth's MMIX constants); the high bits are the output.
struct Lcg {
  uint64_t state;
  uint32_t Next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  }
};

// Adds noise * uniform(-1, 1) to every parameter, deterministically.
void PerturbParams(dst_engine_t *engine, double noise) {
  size_t count = 0;
  CHECK_DST(dst_engine_param_count(engine, &count));
  for (size_t i = 0; i < count; ++i) {
    dst_tensor_info_t info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_DST(dst_engine_param_info(engine, i, &info));
    std::vector<float> data(static_cast<size_t>(info.numel));
    CHECK_DST(dst_engine_get_param(engine, info.name, data.data(), data.size()));
    Lcg rng{0x5851f42d4c957f2dull + 977ull * i};
    for (float &x : data) {
      const double u = rng.Next() / 2147483648.0 - 1.0;  // Next() < 2^31
      x = static_cast<float>(x + noise * u);
    }
    CHECK_DST(dst_engine_set_param(engine, info.name, data.data(), data.size()));
  }
}

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
};

Batch MakeBatch(int k, size_t n_samples, size_t seq_len, int64_t vocab) {
  Lcg tok{0x9e3779b97f4a7c15ull ^ (1000003ull * static_cast<uint64_t>(k + 1))};
  Lcg tgt{0xd1b54a32d192ed03ull ^ (7919ull * static_cast<uint64_t>(k + 1))};
  for (int i = 0; i < 4; ++i) {  // decorrelate the nearby seeds
    tok.Next();
    tgt.Next();
  }
  Batch b;
  const size_t n = n_samples * seq_len;
  b.tokens.resize(n);
  b.targets.resize(n);
  for (size_t i = 0; i < n; ++i) {
    b.tokens[i] = static_cast<int32_t>(tok.Next() % static_cast<uint64_t>(vocab));
    b.targets[i] = static_cast<int32_t>(tgt.Next() % static_cast<uint64_t>(vocab));
    // A few ignored positions (about 1 in 13), different in every batch.
    if ((i * 7 + static_cast<size_t>(k) * 3) % 13 == 5) b.targets[i] = -1;
  }
  return b;
}

dst_batch_t AsDstBatch(const Batch &b, size_t n_samples, size_t seq_len) {
  dst_batch_t batch;
  dst_batch_default(&batch);
  batch.n_samples = n_samples;
  batch.seq_len = seq_len;
  batch.tokens = b.tokens.data();
  batch.tokens_count = b.tokens.size();
  batch.targets = b.targets.data();
  batch.targets_count = b.targets.size();
  return batch;
}

std::string JsonNumber(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s == "nan" || s == "-nan") return "NaN";
  if (s == "inf") return "Infinity";
  if (s == "-inf") return "-Infinity";
  return s;
}

std::string JsonArray(const std::vector<double> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += JsonNumber(v[i]);
  }
  return s + "]";
}

void Usage() {
  std::fprintf(stderr,
               "usage: dst_parity_tool --model MODEL.json --config CONFIG.json --out DIR "
               "[--steps N] [--init-noise S] [--save-checkpoint]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char **argv) {
  std::string model_path, config_path, out_dir;
  long steps = 10;
  double init_noise = 0.0;
  bool save_checkpoint = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--save-checkpoint") {
      save_checkpoint = true;
      continue;
    }
    if (i + 1 >= argc) Usage();
    if (a == "--model") {
      model_path = argv[++i];
    } else if (a == "--config") {
      config_path = argv[++i];
    } else if (a == "--out") {
      out_dir = argv[++i];
    } else if (a == "--steps") {
      char *end = nullptr;
      steps = std::strtol(argv[++i], &end, 10);
      if (end == nullptr || *end != '\0' || steps < 0 || steps > 100000) Usage();
    } else if (a == "--init-noise") {
      char *end = nullptr;
      init_noise = std::strtod(argv[++i], &end);
      if (end == nullptr || *end != '\0' || !(init_noise >= 0.0)) Usage();
    } else {
      Usage();
    }
  }
  if (model_path.empty() || config_path.empty() || out_dir.empty()) Usage();

  dst_engine_options_t options;
  dst_engine_options_default(&options);
  options.model_path = model_path.c_str();
  options.config_path = config_path.c_str();
  options.total_steps = steps;
  dst_engine_t *engine = nullptr;
  CHECK_DST(dst_engine_create(&engine, &options));

  dst_engine_info_t info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_DST(dst_engine_get_info(engine, &info));
  if (info.model_type != DST_MODEL_GPT) Die("only GPT models are supported by this tool");
  if (info.micro_batch_size <= 0 || info.grad_accum_steps <= 0 || info.seq_len <= 0 ||
      info.vocab_size <= 0) {
    Die("engine info has a non-positive micro_batch_size, grad_accum_steps, seq_len or vocab");
  }
  const size_t n_samples = static_cast<size_t>(info.micro_batch_size * info.grad_accum_steps);
  const size_t seq_len = static_cast<size_t>(info.seq_len);

  if (init_noise > 0.0) PerturbParams(engine, init_noise);
  WriteSafetensors(out_dir + "/init.safetensors", DumpParams(engine, /*grads=*/false));

  std::vector<Batch> batches;
  std::vector<Tensor> batch_tensors;
  for (long k = 0; k <= steps; ++k) {
    batches.push_back(MakeBatch(static_cast<int>(k), n_samples, seq_len, info.vocab_size));
    std::vector<int64_t> shape = {static_cast<int64_t>(n_samples), static_cast<int64_t>(seq_len)};
    batch_tensors.push_back(
        {"tokens_" + std::to_string(k), "I32", shape, Bytes(batches[k].tokens)});
    batch_tensors.push_back(
        {"targets_" + std::to_string(k), "I32", shape, Bytes(batches[k].targets)});
  }
  WriteSafetensors(out_dir + "/batches.safetensors", batch_tensors);

  float loss0 = 0.0f;
  dst_batch_t b0 = AsDstBatch(batches[0], n_samples, seq_len);
  CHECK_DST(dst_engine_forward_backward(engine, &b0, &loss0));
  WriteSafetensors(out_dir + "/grads.safetensors", DumpParams(engine, /*grads=*/true));

  std::vector<double> losses, lrs;
  for (long k = 1; k <= steps; ++k) {
    double lr = 0.0;
    CHECK_DST(dst_engine_learning_rate(engine, &lr));
    lrs.push_back(lr);
    float loss = 0.0f;
    dst_batch_t b = AsDstBatch(batches[k], n_samples, seq_len);
    CHECK_DST(dst_engine_train_batch(engine, &b, &loss));
    losses.push_back(loss);
  }
  int64_t step_count = 0;
  CHECK_DST(dst_engine_step_count(engine, &step_count));
  WriteSafetensors(out_dir + "/final.safetensors", DumpParams(engine, /*grads=*/false));
  if (save_checkpoint) {
    const std::string ckpt = out_dir + "/checkpoint";
    if (::mkdir(ckpt.c_str(), 0755) != 0 && errno != EEXIST) {
      Die("cannot create " + ckpt + ": " + std::strerror(errno));
    }
    CHECK_DST(dst_engine_save_checkpoint(engine, ckpt.c_str(), nullptr, nullptr));
  }

  std::string json = "{\n";
  json += "  \"loss0\": " + JsonNumber(loss0) + ",\n";
  json += "  \"train_losses\": " + JsonArray(losses) + ",\n";
  json += "  \"lrs\": " + JsonArray(lrs) + ",\n";
  json += "  \"step_count\": " + std::to_string(step_count) + ",\n";
  json += "  \"n_samples\": " + std::to_string(n_samples) + ",\n";
  json += "  \"seq_len\": " + std::to_string(seq_len) + ",\n";
  json += "  \"micro_batch_size\": " + std::to_string(info.micro_batch_size) + ",\n";
  json += "  \"grad_accum_steps\": " + std::to_string(info.grad_accum_steps) + ",\n";
  json += "  \"num_parameters\": " + std::to_string(info.num_parameters) + "\n";
  json += "}\n";
  const std::string result_path = out_dir + "/result.json";
  FILE *f = std::fopen(result_path.c_str(), "w");
  if (f == nullptr) Die("cannot open " + result_path + ": " + std::strerror(errno));
  bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  if (std::fclose(f) != 0 || !ok) Die("writing " + result_path + " failed");

  dst_engine_destroy(engine);
  return 0;
}
