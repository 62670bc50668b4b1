// Training on a device (dstrain.device "cuda") against the CPU: the same
// steps with every buffer in device memory and every kernel — the layers'
// and the step's (zeroing, the norm and clipping, Adam/AdamW/SGD) — on the
// GPU, then the whole engine from a ds_config. Losses, weights and gradients
// agree within fp32's reordering (the reductions sum in another order).
// Skipped without the plugin or a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/engine/training_device.h"
#include "tests/common/one_rank.h"

namespace dst {
namespace {

constexpr const char *kGpt =
    R"({"type":"gpt","vocab_size":64,"n_ctx":16,"n_layer":2,"n_head":2,"d_model":32,"seed":5})";

Config StepConfig(const std::string &extra) {
  Result<Config> config = ParseConfig(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.5, )" + extra + "}",
      ConfigContext{});
  EXPECT_TRUE(config.ok()) << config.status().message();
  return config.value();
}

#define DST_TRAINING_DEVICE_OR_SKIP(device)                                   \
  Result<std::unique_ptr<TrainingDevice>> opened = TrainingDevice::Open(0);   \
  if (!opened.ok()) GTEST_SKIP() << "skipped: " << opened.status().message(); \
  TrainingDevice &device = *opened.value()

// The values (losses, weights, gradients) within `rel` of the largest.
void ExpectClose(const std::vector<float> &got, const std::vector<float> &want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - double(want[i])), rel * scale)
        << "[" << i << "]: " << got[i] << " vs " << want[i];
}

void ExpectStepsMatchTheCpu(TrainingDevice &device, const std::string &extra, double rel) {
  const Config config = StepConfig(extra);
  const StepsOutcome want = TrainThenReadGradients(kGpt, config, {});
  RankPlacement placement;
  placement.step = device.placement();
  placement.kernels = &device.kernels();
  const StepsOutcome got = TrainThenReadGradients(kGpt, config, placement);
  ASSERT_EQ(want.error, "");
  ASSERT_EQ(got.error, "");
  const Status st = device.TakeStatus();
  ASSERT_TRUE(st.ok()) << st.message();
  ExpectClose(got.values, want.values, rel);
}

// Each step kernel on device memory against the CPU step backend on the same
// random inputs: the conversions bit for bit (both round to nearest even),
// the arithmetic within fp32's reordering.
class DeviceArrays {
 public:
  explicit DeviceArrays(TrainingDevice &device) : memory_(*device.memory()) {}
  ~DeviceArrays() {
    for (void *p : taken_) memory_.Free(p);
  }
  template <typename T>
  T *Copy(const std::vector<T> &host) {
    void *p = memory_.Allocate(host.size() * sizeof(T));
    taken_.push_back(p);
    memory_.Upload(p, host.data(), host.size() * sizeof(T));
    return static_cast<T *>(p);
  }
  template <typename T>
  std::vector<T> Back(const T *device, size_t n) {
    std::vector<T> host(n);
    memory_.Download(host.data(), device, n * sizeof(T));
    return host;
  }

 private:
  MemoryResource &memory_;
  std::vector<void *> taken_;
};

TEST(CudaTraining, StepKernelsMatchTheCpu) {
  DST_TRAINING_DEVICE_OR_SKIP(device);
  const StepKernels &gpu = device.step(), &cpu = HostStepKernels();
  DeviceArrays arrays(device);
  const int64_t n = 5000;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&] {
    std::vector<float> v(static_cast<size_t>(n));
    for (float &x : v) x = normal(rng);
    return v;
  };
  std::vector<float> a = random(), b = random(), m = random(), v = random();
  for (float &x : v) x = std::fabs(x);
  // Each section's calls leave the device's status clean (taken once: the
  // message is the first error's).
  auto expect_no_error = [&device](const char *section) {
    const Status st = device.TakeStatus();
    EXPECT_TRUE(st.ok()) << section << ": " << st.message();
  };

  // Scale, add, norm.
  float *da = arrays.Copy(a), *db = arrays.Copy(b);
  gpu.ScaleRange(0.5f, n, da);
  gpu.AddRange(db, n, da);
  std::vector<float> want = a;
  cpu.ScaleRange(0.5f, n, want.data());
  cpu.AddRange(b.data(), n, want.data());
  ExpectClose(arrays.Back(da, size_t(n)), want, 0.0);
  EXPECT_NEAR(gpu.SumOfSquaresRange(db, n), cpu.SumOfSquaresRange(b.data(), n),
              1e-9 * cpu.SumOfSquaresRange(b.data(), n));
  expect_no_error("scale, add, norm");

  // Adam with the 16-bit copy, SGD with momentum.
  const AdamHyper adam{1e-3, 0.9, 0.999, 1e-8, 0.1, 2, true};
  AdamRange range;
  range.param = arrays.Copy(a);
  range.grad = arrays.Copy(b);
  range.exp_avg = arrays.Copy(m);
  range.exp_avg_sq = arrays.Copy(v);
  range.n = n;
  range.grad_mul = 0.25f;
  range.half_out = arrays.Copy(std::vector<uint16_t>(size_t(n)));
  gpu.AdamUpdate(range, adam);
  std::vector<float> p = a, mm = m, vv = v;
  std::vector<uint16_t> half(static_cast<size_t>(n));
  AdamRange host{p.data(), b.data(), mm.data(), vv.data(), n, 0.25f, half.data(), Half::kBf16};
  cpu.AdamUpdate(host, adam);
  ExpectClose(arrays.Back(range.param, size_t(n)), p, 1e-6);
  ExpectClose(arrays.Back(range.exp_avg_sq, size_t(n)), vv, 1e-6);
  const std::vector<uint16_t> got_half = arrays.Back(range.half_out, size_t(n));
  int64_t off = 0;  // a weight within fp32 rounding of a bf16 boundary may round the other way
  for (int64_t i = 0; i < n; ++i) off += got_half[size_t(i)] != half[size_t(i)];
  EXPECT_LE(off, n / 1000);
  expect_no_error("Adam");
  const SgdHyper sgd{0.05, 0.9, 0.1, 0.01, true, false};
  float *dp = arrays.Copy(a), *dm = arrays.Copy(m);
  gpu.SgdUpdate(db, n, sgd, dp, dm);
  p = a, mm = m;
  cpu.SgdUpdate(b.data(), n, sgd, p.data(), mm.data());
  ExpectClose(arrays.Back(dp, size_t(n)), p, 1e-6);
  expect_no_error("SGD");

  // The 16-bit storage conversions and sums.
  for (Half h : {Half::kBf16, Half::kFp16}) {
    std::vector<uint16_t> ha(static_cast<size_t>(n)), hb(static_cast<size_t>(n));
    cpu.Narrow16(h, a.data(), n, ha.data());
    cpu.Narrow16(h, b.data(), n, hb.data());
    uint16_t *dha = arrays.Copy(std::vector<uint16_t>(size_t(n)));
    gpu.Narrow16(h, arrays.Copy(a), n, dha);
    EXPECT_EQ(arrays.Back(dha, size_t(n)), ha) << HalfName(h);
    uint16_t *dhb = arrays.Copy(hb);
    gpu.Sum16(h, dhb, n, dha);
    cpu.Sum16(h, hb.data(), n, ha.data());
    EXPECT_EQ(arrays.Back(dha, size_t(n)), ha) << HalfName(h);
    gpu.AddInto16(h, arrays.Copy(b), n, dha);
    cpu.AddInto16(h, b.data(), n, ha.data());
    EXPECT_EQ(arrays.Back(dha, size_t(n)), ha) << HalfName(h);
    float *wide = arrays.Copy(a);
    gpu.AddWide16(h, dha, n, wide);
    std::vector<float> wide_cpu = a;
    cpu.AddWide16(h, ha.data(), n, wide_cpu.data());
    ExpectClose(arrays.Back(wide, size_t(n)), wide_cpu, 0.0);
    gpu.Widen16(h, dha, n, wide);
    cpu.Widen16(h, ha.data(), n, wide_cpu.data());
    ExpectClose(arrays.Back(wide, size_t(n)), wide_cpu, 0.0);
    EXPECT_NEAR(gpu.SumOfSquares16(h, dha, n), cpu.SumOfSquares16(h, ha.data(), n),
                1e-9 * cpu.SumOfSquares16(h, ha.data(), n));
    expect_no_error(HalfName(h));
  }
}

TEST(CudaTraining, SgdStepsMatchTheCpu) {
  DST_TRAINING_DEVICE_OR_SKIP(device);
  ExpectStepsMatchTheCpu(
      device, R"("optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}})", 1e-4);
}

// Adam's update divides by the root of the second moment: a gradient near
// zero moves its weight by up to lr whatever its sign, so the bound is looser.
TEST(CudaTraining, AdamWStepsAtZeroOneWithAccumulationMatchTheCpu) {
  DST_TRAINING_DEVICE_OR_SKIP(device);
  ExpectStepsMatchTheCpu(device, R"("optimizer": {"type": "AdamW", "params": {"lr": 0.001}})",
                         2e-3);
  ExpectStepsMatchTheCpu(device, R"("gradient_accumulation_steps": 2,
      "zero_optimization": {"stage": 1},
      "optimizer": {"type": "Adam", "params": {"lr": 0.001}})",
                         2e-3);
}

// ZeRO 3's gathered shards, and 16-bit storage (the device multiplies bf16
// operands, the CPU here may not: the bf16 bound).
TEST(CudaTraining, ZeroThreeAnd16BitStepsMatchTheCpu) {
  DST_TRAINING_DEVICE_OR_SKIP(device);
  ExpectStepsMatchTheCpu(device, R"("zero_optimization": {"stage": 3,
      "stage3_param_persistence_threshold": 100},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}})",
                         2e-3);
  ExpectStepsMatchTheCpu(device, R"("bf16": {"enabled": true}, "zero_optimization": {"stage": 2},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}})",
                         3e-2);
  ExpectStepsMatchTheCpu(device, R"("fp16": {"enabled": true, "initial_scale_power": 8},
      "optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}})",
                         3e-2);
}

// The engine from a ds_config: dstrain.device "cuda" trains the same losses
// as the CPU, and its checkpoint is the CPU's: saved on the device after two
// steps, loaded by a CPU engine, the next two steps match the device's.
// `extra`: more top-level config keys (a leading comma each).
std::unique_ptr<Engine> MakeEngine(const std::string &device, const std::string &extra = "") {
  EngineOptions options;
  options.model_text = kGpt;
  options.config_text = R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
      "dstrain": {"device": ")" +
                        device + R"("})" + extra + "}";
  Result<std::unique_ptr<Engine>> engine = Engine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

std::vector<float> TrainSteps(Engine &engine, int first, int count) {
  std::vector<float> out;
  std::vector<int32_t> tokens(32), targets(32);
  for (int step = first; step < first + count; ++step) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = int32_t((i * 7 + size_t(step) * 3) % 64);
      targets[i] = int32_t((i * 5 + 1) % 64);
    }
    BatchView batch;
    batch.n_samples = 2;
    batch.seq_len = 16;
    batch.tokens = tokens.data(), batch.tokens_count = tokens.size();
    batch.targets = targets.data(), batch.targets_count = targets.size();
    float loss = 0;
    const Status st = engine.TrainBatch(batch, &loss);
    EXPECT_TRUE(st.ok()) << st.message();
    out.push_back(loss);
  }
  return out;
}

TEST(CudaTraining, TheEngineTrainsOnTheDeviceAndItsCheckpointLoadsOnTheCpu) {
  DST_TRAINING_DEVICE_OR_SKIP(device);
  (void)device;
  std::unique_ptr<Engine> cpu = MakeEngine("cpu"), gpu = MakeEngine("cuda");
  ASSERT_TRUE(cpu && gpu);
  const std::vector<float> want = TrainSteps(*cpu, 0, 4);
  std::vector<float> got = TrainSteps(*gpu, 0, 2);
  const std::string dir = ::testing::TempDir() + "dstrain_gpu_checkpoint";
  const Status saved = gpu->SaveCheckpoint(dir, "step2", "");
  ASSERT_TRUE(saved.ok()) << saved.message();
  const std::vector<float> rest = TrainSteps(*gpu, 2, 2);
  got.insert(got.end(), rest.begin(), rest.end());
  ExpectClose(got, want, 1e-4);
  EXPECT_LT(got.back(), got.front()) << "the device run learns";

  std::unique_ptr<Engine> resumed = MakeEngine("cpu");
  ASSERT_TRUE(resumed);
  const Status loaded = resumed->LoadCheckpoint(dir, "step2", nullptr);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  ExpectClose(TrainSteps(*resumed, 2, 2), rest, 1e-4);
}

// ZeRO-Offload (the optimizer state and masters on the host, gradients down
// and 16-bit weights up, overlapped, from page-locked buffers) and
// ZeRO-Infinity (the parameter shard in host memory too, uploaded per layer)
// train the CPU's losses.
TEST(CudaTraining, OffloadedOptimizerAndParametersMatchTheCpu) {
  DST_TRAINING_DEVICE_OR_SKIP(device);
  (void)device;
  const struct {
    const char *extra;
    double tolerance;
  } cases[] = {
      {R"(, "zero_optimization": {"stage": 2,
          "offload_optimizer": {"device": "cpu", "pin_memory": true}})",
       1e-4},
      {R"(, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2,
          "offload_optimizer": {"device": "cpu", "pin_memory": true}})",
       3e-2},
      {R"(, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 100,
          "offload_optimizer": {"device": "cpu", "pin_memory": true},
          "offload_param": {"device": "cpu", "pin_memory": true}})",
       1e-4},
      {R"(, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3,
          "stage3_param_persistence_threshold": 100,
          "offload_optimizer": {"device": "cpu", "pin_memory": true},
          "offload_param": {"device": "cpu"}})",
       3e-2},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(c.extra);
    std::unique_ptr<Engine> cpu = MakeEngine("cpu", c.extra), gpu = MakeEngine("cuda", c.extra);
    ASSERT_TRUE(cpu && gpu);
    ExpectClose(TrainSteps(*gpu, 0, 4), TrainSteps(*cpu, 0, 4), c.tolerance);
  }
}

}  // namespace
}  // namespace dst
