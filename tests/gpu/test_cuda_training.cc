// Training on a device (dstrain.device "cuda") against the CPU: the same
// steps with every buffer in device memory and every kernel — the layers'
// and the step's (zeroing, the norm and clipping, Adam/AdamW/SGD) — on the
// GPU, then the whole engine from a ds_config. Losses, weights and gradients
// agree within fp32's reordering (the reductions sum in another order).
// Skipped without the plugin or a device.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
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

#define DST_TRAINING_DEVICE_OR_SKIP(device)                                    \
  Result<std::unique_ptr<TrainingDevice>> opened = TrainingDevice::Open(0, 1); \
  if (!opened.ok()) GTEST_SKIP() << "skipped: " << opened.status().message();  \
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
  ASSERT_TRUE(device.TakeStatus().ok()) << device.TakeStatus().message();
  ExpectClose(got.values, want.values, rel);
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

// The engine from a ds_config: dstrain.device "cuda" trains the same losses
// as the CPU, and its checkpoint is the CPU's: saved on the device after two
// steps, loaded by a CPU engine, the next two steps match the device's.
std::unique_ptr<Engine> MakeEngine(const std::string &device) {
  EngineOptions options;
  options.model_text = kGpt;
  options.config_text = R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
      "dstrain": {"device": ")" +
                        device + R"("}})";
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

}  // namespace
}  // namespace dst
