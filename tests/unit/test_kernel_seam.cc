// The kernel seam (core/kernels/kernels.h): the layers reach their tensors
// only through the backend. The CPU stands in for a device here: every
// tensor (parameters, gradients, activations, scratch, tokens, targets)
// lives in pages that are mapped without access, and a backend that opens
// them only while one of its kernels runs (cpu::CpuKernels with a Scope).
// A layer that read or wrote a tensor itself — the host-side touch that
// would crash on device memory — faults; the fault handler names the last
// kernel that ran. Each pass (forward, backward, the zero-bubble halves,
// selective recomputation) must also give the same bits as the open run.
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/cpu/cpu_kernels.h"
#include "core/model/activation_store.h"
#include "tests/common/guarded_memory.h"
#include "tests/common/layer_chain.h"

namespace dst {
namespace {

// Exits 0 when the guarded run gave the open run's bits and the open run
// computed something (the death tests' verdict), else 1 with the reason.
[[noreturn]] void ExitWithVerdict(const ChainOutcome &want, const ChainOutcome &got) {
  g_arena = nullptr;
  if (!want.error.empty() || !got.error.empty()) {
    fprintf(stderr, "%s%s\n", want.error.c_str(), got.error.c_str());
    _exit(1);
  }
  if (want.loss != got.loss || want.grads != got.grads || want.input_grad != got.input_grad) {
    fprintf(stderr, "the guarded run differs: loss %.9g vs %.9g\n", got.loss, want.loss);
    _exit(1);
  }
  if (!(want.loss > 0) || want.grads.empty()) {
    fprintf(stderr, "the open run computed nothing (loss %.9g)\n", want.loss);
    _exit(1);
  }
  _exit(0);
}

// The chain's run with its tensors closed to the host against the open run:
// no fault, the same loss and the same gradient bits. Exits 0 when so
// (run as a death test: a fault ends the process).
void GuardedRunMatches(std::unique_ptr<Chain> (*make)(), ChainPass pass) {
  std::unique_ptr<Chain> open_chain = MakeChain(make), guarded_chain = MakeChain(make);
  HostMemory host(64 << 20);
  const ChainOutcome want = RunChain(*open_chain, HostKernels<float>(), host, pass);

  Arena arena(64 << 20);
  GuardArena(&arena);
  GuardedKernels guarded;
  const ChainOutcome got = RunChain(*guarded_chain, guarded, arena, pass, ClosedAround(arena));
  ExitWithVerdict(want, got);
}

class KernelSeam : public ::testing::Test {
 protected:
  // The death test re-runs this test alone in a fresh process (OpenMP's
  // threads do not survive a fork).
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// The whole model with its parameters, gradients, activation store and work
// buffers in the closed arena: the model, the store's 16-bit stash and the
// rounding of 16-bit outputs touch them only through the backend too.
void GuardedModelMatches(const ModelCase &c) {
  HostMemory host(16 << 20);
  const ChainOutcome want = RunModel(c, HostKernels<float>(), host, /*in_memory=*/false);
  Arena arena(64 << 20);
  GuardArena(&arena);
  GuardedKernels guarded;
  const ChainOutcome got = RunModel(c, guarded, arena, /*in_memory=*/true, ClosedAround(arena));
  ExitWithVerdict(want, got);
}

ModelCase Case(std::optional<Half> half, bool recompute, bool selective, bool split) {
  ModelCase c;
  c.activations.half = half;
  c.activations.recompute = recompute;
  c.activations.selective = selective;
  c.activations.split_backward = split;
  if (split) c.pass = ChainPass::kZeroBubbleRecompute;
  return c;
}

TEST_F(KernelSeam, AModelTouchesItsBuffersOnlyThroughTheBackend) {
  EXPECT_EXIT(GuardedModelMatches(Case(std::nullopt, false, false, false)),
              ::testing::ExitedWithCode(0), "");
}

TEST_F(KernelSeam, The16BitStashAndRoundingToo) {
  EXPECT_EXIT(GuardedModelMatches(Case(Half::kBf16, false, false, false)),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(GuardedModelMatches(Case(Half::kFp16, false, true, true)),
              ::testing::ExitedWithCode(0), "");
}

TEST_F(KernelSeam, FullRecomputationToo) {
  EXPECT_EXIT(GuardedModelMatches(Case(Half::kBf16, true, false, false)),
              ::testing::ExitedWithCode(0), "");
}

std::unique_ptr<Chain> Mse() {
  return TinySequential(true);
}
std::unique_ptr<Chain> CrossEntropy() {
  return TinySequential(false);
}

TEST_F(KernelSeam, GptLayersTouchTheirTensorsOnlyThroughTheBackend) {
  EXPECT_EXIT(GuardedRunMatches(TinyGpt, ChainPass::kWhole), ::testing::ExitedWithCode(0), "");
}

TEST_F(KernelSeam, GptZeroBubbleHalvesAndRecomputationToo) {
  EXPECT_EXIT(GuardedRunMatches(TinyGpt, ChainPass::kZeroBubbleRecompute),
              ::testing::ExitedWithCode(0), "");
}

// The LLaMA and BLOOM layers too (RMSNorm, rotary, the SiLU gate,
// grouped-query and ALiBi attention, the untied head).
TEST_F(KernelSeam, LlamaAndBloomLayersTouchTheirTensorsOnlyThroughTheBackend) {
  EXPECT_EXIT(GuardedRunMatches(TinyLlama, ChainPass::kWhole), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(GuardedRunMatches(TinyLlama, ChainPass::kZeroBubbleRecompute),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(GuardedRunMatches(TinyBloom, ChainPass::kZeroBubbleRecompute),
              ::testing::ExitedWithCode(0), "");
}

TEST_F(KernelSeam, SequentialLayersTouchTheirTensorsOnlyThroughTheBackend) {
  EXPECT_EXIT(GuardedRunMatches(Mse, ChainPass::kWhole), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(GuardedRunMatches(CrossEntropy, ChainPass::kZeroBubbleRecompute),
              ::testing::ExitedWithCode(0), "");
}

// The guard itself works: a host write into the closed arena is caught and
// named (the test above would pass vacuously without it).
TEST_F(KernelSeam, AHostTouchOfAClosedTensorIsCaught) {
  auto touch = [] {
    Arena arena(1 << 16);
    float *x = arena.Take<float>(16);
    GuardArena(&arena);
    GuardedKernels guarded;
    arena.Close();
    guarded.Zero(16, x);                           // through the backend: fine
    *static_cast<volatile float *>(x + 3) = 1.0f;  // the host itself: faults
    _exit(0);
  };
  EXPECT_EXIT(touch(), ::testing::ExitedWithCode(3), "outside the backend, after kernel Zero");
}

// The activation store's 16-bit stash converts through the backend too:
// kept in 16 bits after the forward, widened before the backward.
std::vector<std::string> g_calls;
struct Record {
  explicit Record(const char *kernel) { g_calls.emplace_back(kernel); }
};

TEST(KernelSeamStore, The16BitStashConvertsThroughTheBackend) {
  LayerSaveSpec layer;
  layer.tensors = {{64}, {8, /*exact=*/true}};
  layer.first_is_output = true;
  ActivationOptions options;
  options.half = Half::kBf16;
  options.slots = 2;
  ActivationStore<float> store({layer, layer}, options, nullptr);
  cpu::CpuKernels<float, Record> kernels;
  std::vector<float> want(64);
  for (int slot = 0; slot < 2; ++slot) {  // both slots' layer 0 share one fp32 region
    float *out = store.at(slot, 0)[0];
    for (int i = 0; i < 64; ++i) out[i] = 1.0f + float(i + 100 * slot) / 3.0f;
    if (slot == 0) want.assign(out, out + 64);
    store.AfterForward(slot, 0, kernels);
  }
  store.Restore(0, 0, kernels);  // slot 1 overwrote the region: slot 0's values come back
  EXPECT_EQ(g_calls, (std::vector<std::string>{"StashTo16", "StashTo16", "UnstashFrom16"}));
  const float *back = store.at(0, 0)[0];
  int rounded_away = 0;  // values 1 + i/3 mostly need more than bf16's 8 bits
  for (int i = 0; i < 64; ++i) {
    uint16_t h;
    float rounded;
    FromFloat(Half::kBf16, &want[size_t(i)], &h, 1);
    ToFloat(Half::kBf16, &h, &rounded, 1);
    ASSERT_EQ(back[i], rounded) << i;
    rounded_away += back[i] != want[size_t(i)];
  }
  EXPECT_GT(rounded_away, 32);
}

// An eval forward (no backward follows) stashes nothing, rounds only the
// layers' outputs, and gives the training forward's loss bit for bit.

// bf16 training: each stashed tensor's bf16 copy is reachable from its
// LayerActivations (what bf16 GEMMs read instead of rounding again): the bits
// of the rounded fp32 tensor, per slot; exact tensors have none, nor has fp16.
TEST(KernelSeamStore, Bf16ViewsHoldTheStashedValuesOfTheirSlot) {
  LayerSaveSpec layer;
  layer.tensors = {{40}, {8, /*exact=*/true}, {24}};
  layer.first_is_output = true;
  ActivationOptions options;
  options.half = Half::kBf16;
  options.slots = 2;
  ActivationStore<float> store({layer, layer}, options, nullptr);
  cpu::CpuKernels<float> kernels;
  for (int slot = 0; slot < 2; ++slot) {
    LayerActivations<float> &act = store.at(slot, 0);
    for (size_t t : {size_t(0), size_t(2)})
      for (int i = 0; i < layer.tensors[t].numel; ++i)
        act[t][i] = float(i + 7 * int(t) + 100 * slot) / 3.0f;
    store.AfterForward(slot, 0, kernels);
  }
  for (int slot = 0; slot < 2; ++slot) {
    const LayerActivations<float> &act = store.at(slot, 0);
    EXPECT_EQ(act.Bf16(1), nullptr);  // exact: fp32 only
    for (size_t t : {size_t(0), size_t(2)}) {
      ASSERT_NE(act.Bf16(t), nullptr) << t;
      for (int i = 0; i < layer.tensors[t].numel; ++i)
        ASSERT_EQ(act.Bf16(t)[i], FloatToBFloat16(float(i + 7 * int(t) + 100 * slot) / 3.0f))
            << "slot " << slot << " tensor " << t << " at " << i;
    }
  }
  options.half = Half::kFp16;
  ActivationStore<float> fp16({layer}, options, nullptr);
  EXPECT_EQ(fp16.at(0, 0).Bf16(0), nullptr);
}
// The tensors left to the GEMMs (operand_of, bf16 operands, bf16 keep, no
// selective recomputation) whose producers write bf16 (bf16_alone) are kept
// in the stash alone: marked only16, no
// fp32 tensor, their fp32 space gone from the shared regions (the bytes the
// estimate counts too). Not without bf16 operands, under fp16, or under
// selective recomputation; never an exact tensor.
TEST(KernelSeamStore, TensorsLeftToTheGemmsAreKeptInBf16Alone) {
  LayerSaveSpec layer;
  layer.tensors = {{40}, {8, /*exact=*/true}, {24}, {16}, {12}};
  layer.tensors[1].operand_of = ModuleType::kLinear;
  layer.tensors[2].operand_of = ModuleType::kLinear;
  layer.tensors[4].operand_of = ModuleType::kLinear;  // a GEMM's output: fp32 too
  layer.tensors[2].bf16_alone = true;
  layer.tensors[1].bf16_alone = true;  // exact: not kept in 16 bits at all
  layer.tensors[3].bf16_alone = true;  // no operand_of: not left to the GEMMs
  layer.first_is_output = true;
  ActivationOptions options;
  options.half = Half::kBf16;
  options.slots = 2;
  options.bf16_operands = true;
  MemoryTracker tracker;
  ActivationStore<float> store({layer, layer}, options, &tracker);
  for (int slot = 0; slot < 2; ++slot) {
    const LayerActivations<float> &act = store.at(slot, 1);
    EXPECT_EQ(act.only16, (std::vector<uint8_t>{0, 0, 1, 0, 0})) << slot;
    EXPECT_NE(act[4], nullptr);
    EXPECT_NE(act.Bf16(4), nullptr);
    EXPECT_EQ(act[2], nullptr);
    EXPECT_EQ(act.Fp32(2), nullptr);
    EXPECT_EQ(act.Bf16Only(2), act.Bf16(2));
    EXPECT_NE(act.Bf16(2), nullptr);
    EXPECT_NE(act[3], nullptr);
    EXPECT_EQ(act.Fp32(3), act[3]);
    EXPECT_EQ(act.Bf16Only(3), nullptr);
    EXPECT_EQ(act.Fp32(1), act[1]);  // exact: fp32 only
    EXPECT_NE(act[1], nullptr);
  }
  options.bf16_operands = false;
  MemoryTracker plain_tracker;
  ActivationStore<float> plain({layer, layer}, options, &plain_tracker);
  EXPECT_EQ(plain.at(0, 1).only16, (std::vector<uint8_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(plain.at(0, 1).Fp32(2), plain.at(0, 1)[2]);
  EXPECT_NE(plain.at(0, 1)[2], nullptr);
  // Tensor 2's fp32 space in both shared regions (aligned), the rest the same.
  const int64_t saved = plain_tracker.Current(MemoryCategory::kActivations) -
                        tracker.Current(MemoryCategory::kActivations);
  EXPECT_GE(saved, 2 * 24 * int64_t(sizeof(float)));
  EXPECT_LT(saved, 2 * 24 * int64_t(sizeof(float)) + 2 * 64 * int64_t(sizeof(float)));
  options.bf16_operands = true;
  EXPECT_EQ(ActivationStore<float>::Bytes({layer, layer}, options),
            tracker.Current(MemoryCategory::kActivations));
  // Not under fp16, nor for a tensor selective recomputation rebuilds (it is
  // rebuilt in fp32 in the transient region); the others still are then.
  ActivationOptions fp16 = options;
  fp16.half = Half::kFp16;
  LayerSaveSpec rebuilt = layer;
  rebuilt.tensors[2].recomputable = true;
  ActivationOptions selective = options;
  selective.selective = true;
  for (const auto &[what, store] :
       {std::pair{"fp16", ActivationStore<float>({layer}, fp16, nullptr)},
        std::pair{"selective, recomputable",
                  ActivationStore<float>({rebuilt}, selective, nullptr)}}) {
    EXPECT_FALSE(store.at(0, 0).Only16(2)) << what;
    EXPECT_NE(store.at(0, 0)[2], nullptr) << what;
    EXPECT_EQ(store.at(0, 0).Fp32(2), store.at(0, 0)[2]) << what;
  }
  ActivationStore<float> kept({layer}, selective, nullptr);
  EXPECT_TRUE(kept.at(0, 0).Only16(2)) << "selective, not recomputable";
  EXPECT_EQ(kept.at(0, 0)[2], nullptr);
}

TEST(KernelSeamStore, AnEvalForwardStashesNothingAndGivesTheSameLoss) {
  ModelCase c;
  c.activations.half = Half::kBf16;
  Result<ModelSpec> spec = ParseModelSpec(c.json);
  ASSERT_TRUE(spec.ok());
  Model<float> model(spec.value(), {2, 8, 1}, nullptr, {}, c.activations);
  cpu::CpuKernels<float, Record> kernels;
  model.SetKernels(kernels);
  std::vector<int32_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7) % 32);
  MicroBatch<float> mb;
  mb.B = 2;
  mb.seq = 8;
  mb.tokens = ids.data();
  mb.targets = ids.data() + 16;
  RoundingHooks hooks(Half::kBf16);
  double losses[2];
  size_t stashes[2], rounds[2];
  for (int eval = 0; eval < 2; ++eval) {
    g_calls.clear();
    mb.backward_follows = eval == 0;
    Result<double> loss = model.Forward(mb, &hooks);
    ASSERT_TRUE(loss.ok()) << loss.status().message();
    losses[eval] = loss.value();
    stashes[eval] = size_t(std::count(g_calls.begin(), g_calls.end(), "StashTo16"));
    rounds[eval] = size_t(std::count(g_calls.begin(), g_calls.end(), "RoundTo16"));
  }
  EXPECT_EQ(losses[1], losses[0]);
  EXPECT_GT(stashes[0], 0u);
  EXPECT_EQ(stashes[1], 0u);
  EXPECT_EQ(rounds[1], 3u);  // the embedding's and the two blocks' outputs
}

}  // namespace
}  // namespace dst
