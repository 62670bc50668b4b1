// The whole training step through the device seam (dstrain.device "cuda"'s
// layouts): the model's parameters, gradients and activations, the optimizer
// state, the staged batch — every buffer — live in memory closed to the host
// (tests/common/guarded_memory.h), the layers compute through the guarded
// layer backend and DataParallel + Optimizer through the guarded step backend
// (zeroing, averaging, the norm and clipping, the Adam/AdamW/SGD updates,
// reading and writing whole tensors). A host touch anywhere in the step —
// what would crash on device memory — faults and names the last kernel; the
// steps must also give the host run's losses and weights bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/comm/routed_communicator.h"
#include "core/config/config.h"
#include "core/engine/training_device.h"
#include "core/device/guarded_device.h"
#include "tests/common/guarded_memory.h"
#include "tests/common/one_rank.h"

namespace dst {
namespace {

constexpr const char *kGpt =
    R"({"type":"gpt","vocab_size":32,"n_ctx":8,"n_layer":2,"n_head":2,"d_model":16,"seed":5})";
constexpr const char *kSequential =
    R"({"type":"sequential","input_dim":6,"loss":"mse","seed":4,"layers":[
        {"type":"linear","out_features":8},{"type":"layernorm"},{"type":"gelu"},
        {"type":"linear","out_features":3}]})";

Config StepConfig(const std::string &extra) {
  const std::string text =
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.5, )" + extra + "}";
  Result<Config> config = ParseConfig(text, ConfigContext{});
  EXPECT_TRUE(config.ok()) << config.status().message();
  return config.value();
}

// Exits 0 when the guarded steps gave the host run's bits (a death test: a
// fault ends the process with code 3 first).
void GuardedStepsMatch(const char *spec, const std::string &extra) {
  omp_set_num_threads(1);
  const Config config = StepConfig(extra);
  const StepsOutcome want = TrainThenReadGradients(spec, config, {});
  Arena arena(64 << 20);
  GuardArena(&arena);
  GuardedKernels kernels;
  GuardedStepKernels step;
  const StepsOutcome got =
      TrainThenReadGradients(spec, config, {{&arena, &step}, &kernels}, ClosedAround(arena));
  g_arena = nullptr;
  if (!want.error.empty() || !got.error.empty()) {
    fprintf(stderr, "%s%s\n", want.error.c_str(), got.error.c_str());
    _exit(1);
  }
  if (want.values.empty() || !(want.values[0] > 0)) {
    fprintf(stderr, "the host run computed nothing\n");
    _exit(1);
  }
  if (got.values.size() != want.values.size() ||
      std::memcmp(got.values.data(), want.values.data(), want.values.size() * sizeof(float)) != 0) {
    fprintf(stderr, "the guarded steps differ: first loss %.9g vs %.9g\n", double(got.values[0]),
            double(want.values[0]));
    _exit(1);
  }
  _exit(0);
}

class StepSeam : public ::testing::Test {
 protected:
  // The death test re-runs this test alone in a fresh process.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(StepSeam, AnAdamWStepTouchesItsBuffersOnlyThroughTheBackends) {
  EXPECT_EXIT(GuardedStepsMatch(kGpt, R"("optimizer": {"type": "AdamW",
                                 "params": {"lr": 0.01, "weight_decay": 0.1}})"),
              ::testing::ExitedWithCode(0), "");
}

TEST_F(StepSeam, ZeroOneWithAccumulationAndAdamToo) {
  EXPECT_EXIT(GuardedStepsMatch(kGpt, R"("gradient_accumulation_steps": 2,
                                 "zero_optimization": {"stage": 1},
                                 "optimizer": {"type": "Adam", "params": {"lr": 0.01}})"),
              ::testing::ExitedWithCode(0), "");
}

TEST_F(StepSeam, ZeroTwosPartitionedGradientsToo) {
  EXPECT_EXIT(GuardedStepsMatch(kGpt, R"("gradient_accumulation_steps": 2,
                                 "zero_optimization": {"stage": 2, "reduce_bucket_size": 300},
                                 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}})"),
              ::testing::ExitedWithCode(0), "");
}

// 16-bit storage: the parameters widened into working buffers, the fp32
// gradients rounded into 16-bit storage, the masters updated with the 16-bit
// copy written in the same pass, the fp16 loss scaler; ZeRO 3's shards.
TEST_F(StepSeam, Bf16StorageAtZeroZeroToo) {
  EXPECT_EXIT(GuardedStepsMatch(kGpt, R"("bf16": {"enabled": true},
                                 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}})"),
              ::testing::ExitedWithCode(0), "");
}

TEST_F(StepSeam, Fp16WithItsLossScalerAtZeroOneToo) {
  EXPECT_EXIT(GuardedStepsMatch(kGpt, R"("fp16": {"enabled": true, "initial_scale_power": 8},
                                 "zero_optimization": {"stage": 1},
                                 "optimizer": {"type": "SGD", "params": {"lr": 0.05,
                                                                         "momentum": 0.9}})"),
              ::testing::ExitedWithCode(0), "");
}

TEST_F(StepSeam, ZeroThreesShardsInFp32AndBf16Too) {
  EXPECT_EXIT(GuardedStepsMatch(kGpt, R"("zero_optimization": {"stage": 3,
                                     "stage3_param_persistence_threshold": 40},
                                 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}})"),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      GuardedStepsMatch(kGpt, R"("bf16": {"enabled": true}, "gradient_accumulation_steps": 2,
                                 "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0},
                                 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}})"),
      ::testing::ExitedWithCode(0), "");
}

// ZeRO-Offload: the optimizer state and master weights on the host, the
// gradients down and the weights up each step (fp32 with a mirror; bf16 with
// CPU-Adam writing the 16-bit copy; SGD).
TEST_F(StepSeam, OffloadedOptimizerStateStaysOnTheHost) {
  EXPECT_EXIT(GuardedStepsMatch(kGpt, R"("zero_optimization": {"stage": 1,
                                     "offload_optimizer": {"device": "cpu"}},
                                 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}})"),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      GuardedStepsMatch(kGpt, R"("bf16": {"enabled": true}, "zero_optimization": {"stage": 2,
                                     "offload_optimizer": {"device": "cpu"}},
                                 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}})"),
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(GuardedStepsMatch(kGpt, R"("fp16": {"enabled": true, "initial_scale_power": 8},
                                 "zero_optimization": {"stage": 3,
                                     "offload_optimizer": {"device": "cpu"}},
                                 "optimizer": {"type": "SGD", "params": {"lr": 0.05,
                                                                         "momentum": 0.9}})"),
              ::testing::ExitedWithCode(0), "");
}

// fp16/bf16_override_modules: the listed layers' tensors whole in fp32 beside
// the 16-bit ones (their gradients overlaid, their values taken from the
// masters), with the state on the device and on the host.
TEST_F(StepSeam, Fp32ModulesUnder16BitsToo) {
  EXPECT_EXIT(GuardedStepsMatch(kGpt, R"("bf16": {"enabled": true,
                                     "bf16_override_modules": ["layernorm", "embedding"]},
                                 "zero_optimization": {"stage": 2},
                                 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}})"),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(GuardedStepsMatch(kGpt, R"("fp16": {"enabled": true, "initial_scale_power": 8,
                                     "fp16_override_modules": ["layernorm"]},
                                 "zero_optimization": {"stage": 1,
                                     "offload_optimizer": {"device": "cpu"}},
                                 "optimizer": {"type": "SGD", "params": {"lr": 0.05}})"),
              ::testing::ExitedWithCode(0), "");
}

TEST_F(StepSeam, SgdWithNesterovMomentumToo) {
  EXPECT_EXIT(GuardedStepsMatch(kSequential, R"("optimizer": {"type": "SGD",
                                 "params": {"lr": 0.05, "momentum": 0.9, "nesterov": true}})"),
              ::testing::ExitedWithCode(0), "");
}

// What checkpoints use on a device, in closed memory: the parameters as a
// host copy (FullParams / LocalParams download them; a load writes the copy
// and ParamsChanged uploads it) and the optimizer state through its store's
// Read / Write (Resident is null off the host).
void CheckpointAccessWorksOnClosedMemory() {
  omp_set_num_threads(1);
  const Config config = StepConfig(R"("optimizer": {"type": "AdamW", "params": {"lr": 0.01}})");
  Arena arena(64 << 20);
  GuardArena(&arena);
  GuardedKernels kernels;
  GuardedStepKernels step;
  Rank rank(kGpt, config, ActivationOptions{}, {{&arena, &step}, &kernels});
  auto fail = [](const char *what) {
    fprintf(stderr, "%s\n", what);
    _exit(1);
  };
  arena.Close();
  (void)rank.Train(TrainSchedule(1), 1);
  DataParallelism &dp = *rank.dp;
  ShardInfo held;
  float *params = dp.LocalParams(&held);
  if (params == nullptr || arena.Holds(params) || dp.FullParams() != params) fail("no host copy");
  const ParamDecl &wte = rank.model->params().decls()[0];
  std::vector<float> read(size_t(wte.numel));
  if (!dp.ReadParam(0, read.data()).ok()) fail("ReadParam");
  if (std::memcmp(read.data(), params + wte.offset, read.size() * 4) != 0) fail("stale host copy");
  for (int64_t i = 0; i < held.size; ++i) params[i] *= 2.0f;  // a load writes the copy
  if (!dp.ParamsChanged().ok()) fail("ParamsChanged");
  std::vector<float> back(read.size());
  if (!dp.ReadParam(0, back.data()).ok()) fail("ReadParam");
  for (size_t i = 0; i < back.size(); ++i)
    if (back[i] != 2.0f * read[i]) fail("the loaded copy did not reach the device");
  StateStore &state = dp.optimizer().state();
  if (state.Resident(0) != nullptr) fail("device state handed out as host memory");
  std::vector<float> m(size_t(state.numel())), again(m.size());
  if (!state.Read(0, 0, state.numel(), m.data()).ok()) fail("state Read");
  m[5] = 0.25f;
  if (!state.Write(0, 0, state.numel(), m.data()).ok() ||
      !state.Read(0, 0, state.numel(), again.data()).ok() || again != m)
    fail("state Write");
  arena.Open();
  g_arena = nullptr;
  _exit(0);
}

TEST_F(StepSeam, CheckpointsReadAHostCopyAndTheStateThroughItsStore) {
  EXPECT_EXIT(CheckpointAccessWorksOnClosedMemory(), ::testing::ExitedWithCode(0), "");
}

// The guard covers the step's own code: a host write into a gradient after
// the step backend ran is caught and named.
TEST_F(StepSeam, AHostTouchOfAClosedGradientIsCaught) {
  auto touch = [] {
    Arena arena(1 << 16);
    float *g = arena.Take<float>(16);
    GuardArena(&arena);
    GuardedStepKernels step;
    arena.Close();
    step.ScaleRange(0.5f, 16, g);                  // through the backend: fine
    *static_cast<volatile float *>(g + 3) = 1.0f;  // the host itself: faults
    _exit(0);
  };
  EXPECT_EXIT(touch(), ::testing::ExitedWithCode(3),
              "outside the backend, after kernel ScaleRange");
}

// The layouts a device does not train yet are named errors, with the fix.
TEST(DeviceConfig, LayoutsADeviceDoesNotTrainYetAreNamed) {
  auto error = [](const std::string &extra, int64_t world = 1) {
    ConfigContext context;
    context.world_size = world;
    const std::string text = R"({"train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
        "dstrain": {"device": "cuda"})" +
                             extra + "}";
    Result<Config> config = ParseConfig(text, context);
    return config.ok() ? std::string("ok") : config.status().message();
  };
  EXPECT_EQ(error(""), "ok");
  EXPECT_EQ(error(R"(, "zero_optimization": {"stage": 1})"), "ok");
  EXPECT_EQ(error(R"(, "bf16": {"enabled": true})"), "ok");
  EXPECT_EQ(error(R"(, "fp16": {"enabled": true}, "zero_optimization": {"stage": 3})"), "ok");
  EXPECT_EQ(error(R"(, "zero_optimization": {"stage": 2})"), "ok");
  EXPECT_EQ(error(R"(, "bf16": {"enabled": true, "bf16_override_modules": ["layernorm"]})"), "ok");
  EXPECT_EQ(error(R"(, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}})"),
            "ok");
  EXPECT_NE(error(R"(, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}})")
                .find("zero_optimization.offload_param but no offload_optimizer"),
            std::string::npos);
  EXPECT_EQ(error(R"(, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
                    "offload_optimizer": {"device": "cpu"}})"),
            "ok");
  EXPECT_EQ(error("", 2), "ok");
  EXPECT_EQ(error(R"(, "gradient_compression": {"enabled": true})", 2), "ok");
  EXPECT_NE(error(R"(, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme",
                                                 "nvme_path": "/tmp"}})")
                .find("Add \"offload_optimizer\""),
            std::string::npos);

  ConfigContext one;
  Result<Config> bad = ParseConfig(R"({"train_micro_batch_size_per_gpu": 2,
      "dstrain": {"device": "gpu"}})",
                                   one);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dstrain.device: \"gpu\" is not a device"),
            std::string::npos);
  Result<Config> cpu = ParseConfig(R"({"train_micro_batch_size_per_gpu": 2})", one);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu.value().runtime.device, "cpu");
  EXPECT_NE(cpu.value().resolved_json.find("\"device\": \"cpu\""), std::string::npos);
}

// DSTRAIN_TEST_DEVICE=guarded selects the stand-in; another value is named.
TEST(DeviceConfig, TheStandInIsChosenByName) {
  setenv("DSTRAIN_TEST_DEVICE", "guarded", 1);
  Result<std::unique_ptr<TrainingDevice>> guarded = TrainingDevice::Open(0);
  ASSERT_TRUE(guarded.ok()) << guarded.status().message();
  EXPECT_STREQ(guarded.value()->name(), "guarded");
  setenv("DSTRAIN_TEST_DEVICE", "gpu", 1);
  Result<std::unique_ptr<TrainingDevice>> bad = TrainingDevice::Open(0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("the only stand-in device is \"guarded\""),
            std::string::npos);
  unsetenv("DSTRAIN_TEST_DEVICE");
}

// A rank's group on a device: each operation goes to the device group or
// the host group by where its buffer lives.
class Recording final : public ForwardingCommunicator {
 public:
  Recording(const char *name, std::vector<std::string> *log)
      : ForwardingCommunicator(MakeSoloCommunicator("dp")), name_(name), log_(log) {}
  std::unique_ptr<Work> AllReduceSum(float *d, int64_t n) override {
    log_->push_back(std::string(name_) + " AllReduceSum");
    return ForwardingCommunicator::AllReduceSum(d, n);
  }
  std::unique_ptr<Work> Send(const void *, int64_t, int64_t, uint32_t) override {
    log_->push_back(std::string(name_) + " Send");
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> Exchange(const std::vector<PeerOp> &ops) override {
    log_->push_back(std::string(name_) + " Exchange of " + std::to_string(ops.size()));
    return std::make_unique<DoneWork>();
  }

 private:
  const char *name_;
  std::vector<std::string> *log_;
};

TEST(RoutedGroup, DeviceBuffersGoToTheDeviceGroupAndHostOnesToTheHostGroup) {
  std::vector<std::string> log;
  float device[4] = {}, host[1] = {};
  RoutedCommunicator group(std::make_unique<Recording>("host", &log),
                           std::make_unique<Recording>("device", &log),
                           [&](const void *p) { return p >= device && p < device + 4; });
  EXPECT_TRUE(group.AllReduceSum(device + 1, 2)->Wait().ok());
  EXPECT_TRUE(group.AllReduceSum(host, 1)->Wait().ok());
  EXPECT_TRUE(group.Send(device, 16, 0, 0)->Wait().ok());
  EXPECT_TRUE(group.Exchange({{true, device, 4, 0, 0}, {false, device + 2, 4, 0, 0}})->Wait().ok());
  EXPECT_TRUE(group.Exchange({{false, host, 4, 0, 0}})->Wait().ok());
  EXPECT_EQ(log,
            (std::vector<std::string>{"device AllReduceSum", "host AllReduceSum", "device Send",
                                      "device Exchange of 2", "host Exchange of 1"}));
  // One exchange is one group: device and host buffers cannot share it.
  const Status mixed = group.Exchange({{true, device, 4, 0, 0}, {false, host, 4, 0, 0}})->Wait();
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.message().find("mixes device and host buffers"), std::string::npos)
      << mixed.message();
}

// The stand-in's device twin refuses a host buffer, as NCCL would fail on one.
TEST(GuardedDevice, TheDeviceTwinRefusesHostMemory) {
  guarded::Communicator twin(MakeSoloCommunicator("dp"));
  float host[2] = {1, 2};
  const Status st = twin.AllReduceSum(host, 2)->Wait();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("the device group's AllReduceSum was handed host memory"),
            std::string::npos)
      << st.message();
}

// A lone send or receive on the stand-in's device twin is refused, naming
// why (NCCL's stream order: the pipeline's traffic goes in exchanges whose
// order was proved), and so is an exchange over host memory.
TEST(GuardedDevice, TheDeviceTwinRefusesLoneSendsAndHostExchanges) {
  guarded::Communicator twin(MakeSoloCommunicator("pp"));
  float buffer[2] = {};
  const Status send = twin.Send(buffer, 8, 1, 7)->Wait();
  const Status recv = twin.Recv(buffer, 8, 1, 7)->Wait();
  ASSERT_FALSE(send.ok());
  ASSERT_FALSE(recv.ok());
  EXPECT_NE(send.message().find("handed a lone send (peer 1, tag 7)"), std::string::npos)
      << send.message();
  EXPECT_NE(recv.message().find("post it in an Exchange"), std::string::npos) << recv.message();
  // An exchange must be over device memory, as NCCL's would.
  const Status host = twin.Exchange({{true, buffer, 8, 1, 7}})->Wait();
  ASSERT_FALSE(host.ok());
  EXPECT_NE(host.message().find("the device group's Exchange was handed host memory"),
            std::string::npos)
      << host.message();
}

// The stand-in's region: a kernel, a copy and a collective's Work open it;
// a host touch outside them faults and is named with the last kernel.
TEST(GuardedDevice, AHostTouchOutsideAKernelIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto touch = [] {
    guarded::Memory memory;
    float *x = static_cast<float *>(memory.Allocate(64 * sizeof(float)));
    const float one[4] = {1, 1, 1, 1};
    memory.Upload(x, one, sizeof one);
    guarded::StepKernels step;
    step.ScaleRange(2.0f, 4, x);
    float back[4] = {};
    memory.Download(back, x, sizeof back);
    if (back[3] != 2.0f) _exit(1);
    std::unique_ptr<Communicator> solo =
        std::make_unique<guarded::Communicator>(MakeSoloCommunicator("dp"));
    if (!solo->AllReduceSum(x, 4)->Wait().ok()) _exit(1);
    *static_cast<volatile float *>(x + 1) = 5.0f;  // the host itself: faults
    _exit(0);
  };
  EXPECT_DEATH(touch(),
               "host code touched device memory at 0x[0-9a-f]+ outside a kernel \\(the "
               "last kernel or copy: AllReduceSum\\)");
}

// A copy whose device side is host memory (or whose host side is device
// memory) is named: a GPU's copy of that kind would fail or read garbage.
TEST(GuardedDevice, ACopyOfTheWrongKindIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto upload_into_host = [] {
    guarded::Memory memory;
    float host[2] = {}, src[2] = {1, 2};
    memory.Upload(host, src, sizeof src);
    _exit(0);
  };
  EXPECT_DEATH(upload_into_host(),
               "Upload of 8 bytes was handed host memory at 0x[0-9a-f]+ for "
               "its device side");
  auto download_into_device = [] {
    guarded::Memory memory;
    void *a = memory.Allocate(16), *b = memory.Allocate(16);
    (void)memory.DownloadAsync(b, a, 16);
    _exit(0);
  };
  EXPECT_DEATH(download_into_device(),
               "DownloadAsync of 16 bytes was handed device memory at "
               "0x[0-9a-f]+ for its host side");
}

// Asynchronous copies run on a copy stream of their own, as late as a GPU's
// copy engine may run them: a kernel queued after a download that writes
// its source changes what arrives, unless the compute stream was ordered
// after the copy (OrderAfterCopies) — the hazard the engine's ZeRO-Offload
// copies must guard against, made visible.
TEST(GuardedDevice, CopiesRunOnAStreamOfTheirOwn) {
  guarded::Memory memory;
  guarded::StepKernels step;
  float *x = static_cast<float *>(memory.Allocate(4 * sizeof(float)));
  const float ones[4] = {1, 1, 1, 1};
  memory.Upload(x, ones, sizeof ones);
  float unordered[4] = {}, ordered[4] = {};
  const uint64_t late = memory.DownloadAsync(unordered, x, sizeof unordered);
  step.ScaleRange(2.0f, 4, x);  // overtakes the copy: nothing orders it after
  memory.WaitCopy(late);
  EXPECT_EQ(unordered[0], 2.0f);
  const uint64_t first = memory.DownloadAsync(ordered, x, sizeof ordered);
  memory.OrderAfterCopies();
  step.ScaleRange(2.0f, 4, x);  // waits for the copy on the device
  memory.WaitCopy(first);
  EXPECT_EQ(ordered[0], 2.0f);
  float now[4] = {};
  memory.Download(now, x, sizeof now);
  EXPECT_EQ(now[0], 4.0f);
  memory.Free(x);
}

// The stand-in's memory goes through the caching allocator a GPU's does: a
// freed buffer's block comes back (zeroed) instead of new region pages.
TEST(GuardedDevice, FreedBlocksAreReusedAndZeroed) {
  guarded::Memory memory;
  float *a = static_cast<float *>(memory.Allocate(4096));
  ASSERT_NE(a, nullptr);
  const float ones[4] = {1, 1, 1, 1};
  memory.Upload(a, ones, sizeof ones);
  memory.Free(a);
  const int64_t segments = memory.stats().segment_allocations;
  float *b = static_cast<float *>(memory.Allocate(4000));
  EXPECT_EQ(b, a);
  EXPECT_EQ(memory.stats().segment_allocations, segments);
  EXPECT_GE(memory.stats().cache_hits, 1);
  float back[4] = {9, 9, 9, 9};
  memory.Download(back, b, sizeof back);
  EXPECT_EQ(back[0], 0.0f);
  memory.Free(b);
}

}  // namespace
}  // namespace dst
