// bench_gpu_model: a GPT model's forward and backward on one CUDA device
// through the kernel backend (issue 16), GPT-2 124M by default (12 layers,
// 12 heads, d_model 768, context 1024, vocabulary 50257, micro-batch 8):
// tokens/s, achieved TFLOP/s and MFU against the device's peak. The model's
// parameters, gradients, activations and work buffers live on the device
// (CudaDeviceMemory); each step zeroes the gradients, runs the forward (the
// loss comes back to the host, which waits for the device) and the backward,
// then waits for the stream. No optimizer step (a fused AdamW over 124M
// parameters takes ~1 ms on an H200: bench_gpu_kernels.py) and no data
// parallelism: this is the model's share of a training step.
//
// FLOPs per step: 3 x the model's forward FLOPs (Model::ForwardFlops: every
// GEMM 2mnk, attention's QK^T and AV over the full T x T), the convention
// of dstrain's flops profiler. --peak-tflops sets the device's peak for the
// chosen compute (default: the dense bf16 or fp32 peak of an H100/H200 or
// A100 SXM, recognised by name; anything else needs the flag).
//
// Usage: bench_gpu_model [--layers 12] [--heads 12] [--d-model 768]
//        [--ctx 1024] [--vocab 50257] [--batch 8] [--steps 10] [--warmup 2]
//        [--compute fp32|bf16] [--activations fp32|bf16] [--peak-tflops X]
//        [--device cuda|cpu]
// --device cpu runs the same steps through the CPU backend on host memory
// (OMP_NUM_THREADS threads; no peak unless given): the bench's own check
// where there is no GPU. Prints one JSON line.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/device/cuda_devices.h"
#include "core/device/cuda_kernels.h"
#include "core/device/cuda_seam.h"

namespace {

struct Options {
  long layers = 12, heads = 12, d_model = 768, ctx = 1024, vocab = 50257, batch = 8;
  long steps = 10, warmup = 2;
  std::string compute = "bf16", activations = "fp32", device = "cuda";
  double peak_tflops = 0;
};

int Fail(const std::string &what) {
  std::fprintf(stderr, "bench_gpu_model: %s\n", what.c_str());
  return 1;
}

// The dense peak of a device known by name, for the compute type; 0 if unknown.
double KnownPeakTflops(const std::string &name, bool bf16) {
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos)
    return bf16 ? 989.0 : 67.0;
  if (name.find("A100") != std::string::npos) return bf16 ? 312.0 : 19.5;
  return 0;
}

// --key value pairs into `o`; false on anything else.
bool Parse(int argc, char **argv, Options *o) {
  const std::map<std::string, long *> longs = {
      {"--layers", &o->layers}, {"--heads", &o->heads},  {"--d-model", &o->d_model},
      {"--ctx", &o->ctx},       {"--vocab", &o->vocab},  {"--batch", &o->batch},
      {"--steps", &o->steps},   {"--warmup", &o->warmup}};
  const std::map<std::string, std::string *> words = {
      {"--compute", &o->compute}, {"--activations", &o->activations}, {"--device", &o->device}};
  if (argc % 2 != 1) return false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (auto l = longs.find(key); l != longs.end())
      *l->second = std::atol(value.c_str());
    else if (auto w = words.find(key); w != words.end())
      *w->second = value;
    else if (key == "--peak-tflops")
      o->peak_tflops = std::atof(value.c_str());
    else
      return false;
  }
  return (o->compute == "fp32" || o->compute == "bf16") &&
         (o->activations == "fp32" || o->activations == "bf16") &&
         (o->device == "cuda" || o->device == "cpu") && o->steps > 0;
}

}  // namespace

int main(int argc, char **argv) {
  using namespace dst;
  Options o;
  if (!Parse(argc, argv, &o)) return Fail("bad arguments (see the usage at the top of the source)");
  // The device: a stream, the CUDA backend and device memory; or the host.
  std::unique_ptr<CudaStream> stream;
  std::unique_ptr<CudaKernels> cuda;
  std::unique_ptr<CudaDeviceMemory> memory;
  std::string device = "cpu";
  int threads = omp_get_max_threads();
  if (o.device == "cuda") {
    Result<const CudaRuntime *> runtime = CudaRuntime::Get();
    if (!runtime.ok()) return Fail(runtime.status().message());
    Result<CudaStream> s = CudaStream::Create(*runtime.value(), 0);
    if (!s.ok()) return Fail(s.status().message());
    stream = std::make_unique<CudaStream>(std::move(s.value()));
    Result<std::unique_ptr<CudaKernels>> k = CudaKernels::Create(*runtime.value(), *stream);
    if (!k.ok()) return Fail(k.status().message());
    cuda = std::move(k.value());
    memory = std::make_unique<CudaDeviceMemory>(*stream);
    const CudaDevices &devices = QueryCudaDevices();
    device = devices.devices.empty() ? "?" : devices.devices[0].value("name", std::string("?"));
    threads = 1;  // the CPU kernels' scratch: unused on the device
  }
  const Kernels<float> &kernels =
      cuda ? static_cast<const Kernels<float> &>(*cuda) : HostKernels<float>();
  const bool bf16 = o.compute == "bf16";
  const double peak = o.peak_tflops > 0 ? o.peak_tflops : KnownPeakTflops(device, bf16);

  char json[256];
  std::snprintf(json, sizeof json,
                R"({"type":"gpt","vocab_size":%ld,"n_ctx":%ld,"n_layer":%ld,"n_head":%ld,)"
                R"("d_model":%ld,"seed":1})",
                o.vocab, o.ctx, o.layers, o.heads, o.d_model);
  Result<ModelSpec> spec = ParseModelSpec(json);
  if (!spec.ok()) return Fail(spec.status().message());
  MemoryTracker tracker;
  ActivationOptions activations;
  if (o.activations == "bf16") activations.half = Half::kBf16;
  std::unique_ptr<Model<float>> model;
  try {
    model = std::make_unique<Model<float>>(spec.value(), ActivationLimits{o.batch, o.ctx, threads},
                                           &tracker, ParamStoreOptions{}, activations, ModelPart{},
                                           memory.get());
  } catch (const std::bad_alloc &) {
    return Fail("out of memory building the model" +
                (memory ? ": " + memory->status().message() : std::string()));
  }
  if (memory && !memory->status().ok()) return Fail(memory->status().message());
  model->SetKernels(kernels);
  model->SetComputeType(bf16 ? ComputeType::kBf16 : ComputeType::kFp32);

  const long tokens = o.batch * o.ctx;
  std::vector<int32_t> ids(size_t(2 * tokens));
  std::mt19937 rng(1);
  for (int32_t &id : ids) id = int32_t(rng() % uint32_t(o.vocab));
  Buffer<int32_t> device_ids(&tracker, MemoryCategory::kActivations, ids.size(), memory.get());
  if (memory)
    memory->Upload(device_ids.data(), ids.data(), ids.size() * sizeof(int32_t));
  else
    std::memcpy(device_ids.data(), ids.data(), ids.size() * sizeof(int32_t));
  MicroBatch<float> mb;
  mb.B = o.batch;
  mb.seq = o.ctx;
  mb.tokens = device_ids.data();
  mb.targets = device_ids.data() + tokens;

  double loss = 0, seconds = 0;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    model->params().ZeroGrads();
    Result<double> l = model->Forward(mb);
    if (!l.ok()) return Fail(l.status().message());
    Status st = model->Backward(mb);
    if (st.ok() && stream) st = stream->Synchronize();
    if (!st.ok()) return Fail(st.message());
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step >= o.warmup) seconds += s;
    loss = l.value();
  }
  const double step_s = seconds / o.steps;
  const double flops = 3.0 * model->ForwardFlops(o.batch, o.ctx);
  const double tflops = flops / step_s / 1e12;
  std::printf(
      "{\"device\":\"%s\",\"layers\":%ld,\"d_model\":%ld,\"heads\":%ld,\"ctx\":%ld,"
      "\"vocab\":%ld,\"batch\":%ld,\"compute\":\"%s\",\"activations\":\"%s\",\"steps\":%ld,"
      "\"step_ms\":%.3f,\"tokens_per_s\":%.1f,\"tflops\":%.2f,\"peak_tflops\":%.1f,"
      "\"mfu\":%.4f,\"loss\":%.5f,\"threads\":%d,\"model_bytes\":%lld}\n",
      device.c_str(), o.layers, o.d_model, o.heads, o.ctx, o.vocab, o.batch, o.compute.c_str(),
      o.activations.c_str(), o.steps, step_s * 1e3, double(tokens) / step_s, tflops, peak,
      peak > 0 ? tflops / peak : 0.0, loss, cuda ? 0 : threads, (long long)tracker.TotalPeak());
  return 0;
}
