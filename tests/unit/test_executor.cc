// Programs as data: PrepareProgram's checks, hand-written programs (an
// out-of-order 1F1B-shaped one included) run by the executor on one rank and
// compared with the plain schedule bit for bit, the activation store's
// policies (fp32, 16-bit, recompute) against each other, layer ranges (what a
// pipeline stage runs) against the whole model, and a failing hook stopping
// the pass where it happened.
#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.h>

#include <omp.h>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/engine/executor.h"
#include "core/engine/schedule.h"
#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/precision/loss_scaler.h"
#include "core/zero/data_parallel.h"
#include "tests/common/one_rank.h"

namespace dst {
namespace {

constexpr const char *kGpt =
    R"({"type":"gpt","vocab_size":64,"n_ctx":8,"n_layer":2,"n_head":2,"d_model":32,"seed":3})";
constexpr const char *kSequential =
    R"({"type":"sequential","input_dim":12,"loss":"mse","seed":4,"layers":[
        {"type":"linear","out_features":16},{"type":"layernorm"},{"type":"relu"},
        {"type":"linear","out_features":16},{"type":"gelu"},{"type":"linear","out_features":5}]})";

ModelSpec Spec(const char *text) {
  Result<ModelSpec> spec = ParseModelSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.value();
}

Config MakeConfig(int64_t micro, int64_t accum, const std::string &precision = "") {
  std::string text = R"({"train_micro_batch_size_per_gpu": )" + std::to_string(micro) +
                     R"(, "gradient_accumulation_steps": )" + std::to_string(accum) +
                     R"(, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}})";
  if (!precision.empty()) text += R"(, ")" + precision + R"(": {"enabled": true})";
  text += "}";
  Result<Config> config = ParseConfig(text, ConfigContext{});
  EXPECT_TRUE(config.ok()) << config.status().message();
  return config.value();
}

ActivationOptions Slots(int64_t slots, bool recompute = false) {
  ActivationOptions options;
  options.slots = slots;
  options.recompute = recompute;
  return options;
}

std::vector<Instruction> Prepared(std::vector<Instruction> program, int64_t m, int64_t slots) {
  Status st = PrepareProgram(&program, m, slots);
  EXPECT_TRUE(st.ok()) << st.message();
  return program;
}

// ---------------------------------------------------------------- programs

TEST(Programs, PlainSchedulesUseOneSlotAndMarkTheLastBackward) {
  const std::vector<Instruction> p = Prepared(TrainSchedule(3), 3, 1);
  int backwards = 0;
  for (const Instruction &ins : p) {
    if (ins.op == Op::kForward || ins.op == Op::kBackward) {
      EXPECT_EQ(ins.slot, 0);
    }
    if (ins.op == Op::kBackward) {
      ++backwards;
      EXPECT_EQ(ins.last_backward, ins.micro_batch == 2);
    }
  }
  EXPECT_EQ(backwards, 3);
  EXPECT_EQ(p.back().op, Op::kRecordStep);
  EXPECT_EQ(PeakInFlight(p), 1);
  EXPECT_EQ(PeakInFlight(Prepared(EvalSchedule(4), 4, 1)), 1);
  EXPECT_EQ(ForwardBackwardSchedule(2).back().op, Op::kGatherGradients);
}

TEST(Programs, OneForwardOneBackwardHoldsStagesMicroBatchesOnTheFirstStage) {
  for (int64_t stages = 1; stages <= 5; ++stages)
    for (int64_t m = 1; m <= 8; ++m) {
      const std::vector<Instruction> p =
          Prepared(OneForwardOneBackwardSchedule(m, stages), m, stages);
      EXPECT_EQ(PeakInFlight(p), std::min(stages, m)) << "stages " << stages << " m " << m;
    }
}

TEST(Programs, BadProgramsAreNamedErrors) {
  auto error = [](std::vector<Instruction> p, int64_t m, int64_t slots) {
    Status st = PrepareProgram(&p, m, slots);
    EXPECT_FALSE(st.ok());
    return st.message();
  };
  EXPECT_NE(error({{Op::kBackward, 0}, {Op::kForward, 0}}, 1, 1).find("backward before"),
            std::string::npos);
  EXPECT_NE(error({{Op::kForward, 0}, {Op::kForward, 0}, {Op::kBackward, 0}}, 1, 2)
                .find("already forwarded"),
            std::string::npos);
  EXPECT_NE(
      error({{Op::kForward, 0}, {Op::kForward, 1}, {Op::kBackward, 0}, {Op::kBackward, 1}}, 2, 1)
          .find("more than 1 micro-batches would be in flight"),
      std::string::npos);
  EXPECT_NE(error({{Op::kForward, 0}, {Op::kForward, 1}, {Op::kBackward, 0}}, 2, 2)
                .find("never runs micro-batch 1 backward"),
            std::string::npos);
  EXPECT_NE(error({{Op::kForward, 3}}, 2, 1).find("has 2 micro-batches"), std::string::npos);
  EXPECT_NE(error(OneForwardOneBackwardSchedule(4, 3), 4, 2).find("would be in flight"),
            std::string::npos);
  // Split backward: the weight half after the input half, each once; the
  // slot stays taken until the weight half.
  EXPECT_NE(error({{Op::kForward, 0}, {Op::kBackwardWeight, 0}, {Op::kBackwardInput, 0}}, 1, 1)
                .find("weight gradients before the input gradients"),
            std::string::npos);
  EXPECT_NE(error({{Op::kForward, 0}, {Op::kBackwardInput, 0}, {Op::kBackward, 0}}, 1, 1)
                .find("whole backward after its input half"),
            std::string::npos);
  EXPECT_NE(error({{Op::kForward, 0},
                   {Op::kBackwardInput, 0},
                   {Op::kForward, 1},
                   {Op::kBackwardWeight, 0},
                   {Op::kBackwardInput, 1},
                   {Op::kBackwardWeight, 1}},
                  2, 1)
                .find("more than 1 micro-batches would be in flight"),
            std::string::npos);
  EXPECT_NE(error({{Op::kForward, 0}, {Op::kBackwardInput, 0}}, 1, 1)
                .find("never runs micro-batch 0 backward"),
            std::string::npos);
}

// ---------------------------------------------------------------- one rank

void ExpectBitwiseEqual(const std::vector<float> &a, const std::vector<float> &b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
      << "first loss " << a[0] << " vs " << b[0];
}

struct Case {
  const char *name;
  const char *spec;
  const char *precision;
  // bf16 compute: the GEMMs multiply in bf16 and keep their operands' bf16
  // copies in the 16-bit stash themselves (SavedTensorSpec::operand_of).
  ComputeType compute = ComputeType::kFp32;
};

// A Rank multiplying as the case says.
struct CaseRank : Rank {
  CaseRank(const Case &c, const Config &config, ActivationOptions activations)
      : Rank(c.spec, config, WithOperands(activations, c)) {
    model->SetComputeType(c.compute);
  }
  // bf16 compute on the CPU's kernels: the GEMMs' operands kept in bf16 alone
  // (as the engine plans them).
  static ActivationOptions WithOperands(ActivationOptions activations, const Case &c) {
    activations.bf16_operands = c.compute == ComputeType::kBf16;
    return activations;
  }
};

class ExecutorPrograms : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { omp_set_num_threads(1); }
  // bf16 compute keeps the GEMMs' operands in bf16 and multiplies them in
  // oneDNN's bf16 matmul; below AVX-512 oneDNN has none, and a recomputed
  // operand is not multiplied as the stored one was (Bf16Layers skip too).
  bool LacksBf16Matmul() const {
    return GetParam().compute == ComputeType::kBf16 &&
           dnnl_get_effective_cpu_isa() < dnnl_cpu_isa_avx512_core;
  }
};

// F0 F1 F2 B0 F3 B1 B2 B3: the first stage of a 3-stage 1F1B pipeline, run
// on one rank with three activation slots, equals F0 B0 F1 B1 ... bit for bit
// (backwards run in the same order, so gradients accumulate identically).
TEST_P(ExecutorPrograms, OneForwardOneBackwardEqualsThePlainScheduleBitForBit) {
  const Case &c = GetParam();
  const Config config = MakeConfig(2, 4, c.precision);
  CaseRank plain(c, config, {});
  CaseRank pipelined(c, config, Slots(3));
  const std::vector<float> expected = plain.Train(TrainSchedule(4), 3);
  ExpectBitwiseEqual(pipelined.Train(OneForwardOneBackwardSchedule(4, 3), 3), expected);
  // A hand-written order: every forward first (GPipe-shaped), four slots.
  CaseRank gpipe(c, config, Slots(4));
  std::vector<Instruction> all_forward = {{Op::kZeroGradients}};
  for (int64_t i = 0; i < 4; ++i) all_forward.push_back({Op::kForward, i});
  for (int64_t i = 0; i < 4; ++i) all_forward.push_back({Op::kBackward, i});
  for (Op op : {Op::kReduceGradients, Op::kClipGradients, Op::kOptimizerStep, Op::kRecordStep})
    all_forward.push_back({op});
  ExpectBitwiseEqual(gpipe.Train(all_forward, 3), expected);
}

// Recomputation (keep only each layer's output, recompute in backward)
// reproduces the stored activations bit for bit, with one slot and with 1F1B.
TEST_P(ExecutorPrograms, RecomputeEqualsStoredActivationsBitForBit) {
  if (LacksBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  const Case &c = GetParam();
  const Config config = MakeConfig(2, 3, c.precision);
  CaseRank plain(c, config, {});
  CaseRank recompute(c, config, Slots(1, true));
  CaseRank recompute_1f1b(c, config, Slots(2, true));
  const std::vector<float> expected = plain.Train(TrainSchedule(3), 3);
  ExpectBitwiseEqual(recompute.Train(TrainSchedule(3), 3), expected);
  ExpectBitwiseEqual(recompute_1f1b.Train(OneForwardOneBackwardSchedule(3, 2), 3), expected);
  if (c.spec == kGpt) {  // a block keeps 1 of its 13 tensors (a Linear/ReLU stack: all it has)
    EXPECT_LT(recompute.tracker.Current(MemoryCategory::kActivations),
              plain.tracker.Current(MemoryCategory::kActivations));
  }
}

// A zero-bubble-shaped program (each backward split into its input half and
// a deferred weight half, the weight halves in micro-batch order) equals the
// plain schedule bit for bit: the same GEMMs, the same accumulation order.
// Also with recomputation, where the weight half recomputes the forward.
TEST_P(ExecutorPrograms, SplitBackwardEqualsTheWholeBackwardBitForBit) {
  if (LacksBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  const Case &c = GetParam();
  const Config config = MakeConfig(2, 3, c.precision);
  CaseRank plain(c, config, {});
  const std::vector<float> expected = plain.Train(TrainSchedule(3), 3);
  std::vector<Instruction> split = {{Op::kZeroGradients},     {Op::kForward, 0},
                                    {Op::kForward, 1},        {Op::kBackwardInput, 0},
                                    {Op::kForward, 2},        {Op::kBackwardWeight, 0},
                                    {Op::kBackwardInput, 1},  {Op::kBackwardInput, 2},
                                    {Op::kBackwardWeight, 1}, {Op::kBackwardWeight, 2}};
  for (Op op : {Op::kReduceGradients, Op::kClipGradients, Op::kOptimizerStep, Op::kRecordStep})
    split.push_back({op});
  EXPECT_EQ(PeakInFlight(Prepared(split, 3, 3)), 3);
  for (bool recompute : {false, true}) {
    ActivationOptions options = Slots(3, recompute);
    options.split_backward = true;
    CaseRank zero_bubble(c, config, options);
    ExpectBitwiseEqual(zero_bubble.Train(split, 3), expected);
  }
}

// Recomputation in groups of 2 and 3 layers (DeepSpeed's
// activation_checkpoint_interval) and Megatron's selective recomputation
// (only the attention probabilities) equal the stored activations bit for
// bit, under the plain schedule, 1F1B and a split backward. Under 16 bits,
// selective recomputation rebuilds the probabilities from the kept (rounded)
// QKV while the forward used it before rounding: equal within the rounding.
// Under bf16 compute the forward multiplied the rounded QKV too, and
// selective recomputation keeps the GEMM operands in bf16 alone as the stored
// policy does and rebuilds from that copy: bit for bit again.
TEST_P(ExecutorPrograms, RecomputeGroupsAndSelectiveEqualStoredBitForBit) {
  if (LacksBf16Matmul()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (needs AVX-512)";
  const Case &c = GetParam();
  const Config config = MakeConfig(2, 3, c.precision);
  CaseRank plain(c, config, {});
  const std::vector<float> expected = plain.Train(TrainSchedule(3), 3);
  for (int64_t interval : {2, 3}) {
    ActivationOptions options = Slots(2, true);
    options.recompute_interval = interval;
    CaseRank grouped(c, config, options);
    SCOPED_TRACE("interval " + std::to_string(interval));
    ExpectBitwiseEqual(grouped.Train(OneForwardOneBackwardSchedule(3, 2), 3), expected);
  }
  ActivationOptions selective_options = Slots(2);
  selective_options.selective = true;
  CaseRank selective(c, config, selective_options);
  SCOPED_TRACE("selective");
  const bool exact = std::string(c.precision).empty() || c.compute == ComputeType::kBf16;
  auto expect_selective = [&](const std::vector<float> &run) {
    if (exact) return ExpectBitwiseEqual(run, expected);
    ASSERT_EQ(run.size(), expected.size());
    const size_t steps = 3;  // the losses, then every parameter after the steps
    for (size_t i = 0; i < steps; ++i)
      EXPECT_NEAR(run[i], expected[i], 1e-2 * std::abs(expected[i]));
    double diff = 0, norm = 0;
    for (size_t i = steps; i < run.size(); ++i) {
      diff += double(run[i] - expected[i]) * double(run[i] - expected[i]);
      norm += double(expected[i]) * double(expected[i]);
    }
    EXPECT_LT(std::sqrt(diff / norm), 1e-2);
  };

  expect_selective(selective.Train(OneForwardOneBackwardSchedule(3, 2), 3));
  // Split backward: each half recomputes what it reads.
  const std::vector<Instruction> split = {
      {Op::kZeroGradients},     {Op::kForward, 0},       {Op::kForward, 1},
      {Op::kBackwardInput, 0},  {Op::kForward, 2},       {Op::kBackwardWeight, 0},
      {Op::kBackwardInput, 1},  {Op::kBackwardInput, 2}, {Op::kBackwardWeight, 1},
      {Op::kBackwardWeight, 2}, {Op::kReduceGradients},  {Op::kClipGradients},
      {Op::kOptimizerStep},     {Op::kRecordStep}};
  ActivationOptions split_grouped = Slots(3, true);
  split_grouped.recompute_interval = 2;
  split_grouped.split_backward = true;
  CaseRank zero_bubble_grouped(c, config, split_grouped);
  SCOPED_TRACE("split, interval 2");
  ExpectBitwiseEqual(zero_bubble_grouped.Train(split, 3), expected);
  ActivationOptions split_selective = Slots(3);
  split_selective.selective = true;
  split_selective.split_backward = true;
  CaseRank zero_bubble_selective(c, config, split_selective);
  SCOPED_TRACE("split, selective");
  expect_selective(zero_bubble_selective.Train(split, 3));
  // The probabilities [B, H, T, T] are kept once, not per slot. (Under bf16
  // compute the stored policy keeps them in the bf16 stash alone, with no
  // fp32 copy, while selective recomputation keeps fp32 ones: not compared.)
  if (c.spec == kGpt && c.compute == ComputeType::kFp32) {
    CaseRank stored(c, config, Slots(2));
    EXPECT_LT(selective.tracker.Peak(MemoryCategory::kActivations),
              stored.tracker.Peak(MemoryCategory::kActivations));
  }
}

// Every layer that owns parameters splits its backward (a layer that kept
// the defaults would write gradients in its input half, outside ZeRO's
// staging): it declares what its weight half reads.
TEST(SplitBackward, EveryLayerWithParametersDefersItsWeightGradients) {
  for (const char *text : {kGpt, kSequential}) {
    MemoryTracker tracker;
    Model<float> model(Spec(text), {2, 8, 1}, &tracker);
    for (size_t i = 0; i < model.layers().size(); ++i) {
      if (model.layer_params()[i].ids.empty()) continue;
      EXPECT_FALSE(model.layers()[i]->DeferredTensors({2, 8, 1}).empty())
          << model.layers()[i]->Kind();
    }
  }
}

// Under bf16 compute every tensor a GPT block keeps only for its GEMMs (and
// the GELU input, which the GELU backward reads in bf16) is kept in bf16
// alone: those LayerNorm, the softmax and GELU write (their bf16 copy alone)
// and the GEMM outputs qkv, the attention output and the GELU input (in fp32
// in the forward's scratch, rounded by their readers). What stays fp32: the
// output, the residual sum, the LayerNorm statistics.
// (That the planned path gives the unplanned one's bits is the recompute
// cases above: recomputation plans no bf16 operands.)
TEST(Bf16Operands, AGptBlockKeepsEveryGemmOperandInBf16Alone) {
  MemoryTracker tracker;
  const ActivationLimits limits{2, 8, 1};
  Model<float> model(Spec(kGpt), limits, &tracker);
  const std::vector<SavedTensorSpec> saved = model.layers()[1]->SavedTensors(limits);
  int operands = 0;
  for (size_t i = 0; i < saved.size(); ++i) {
    if (!saved[i].operand_of.has_value()) continue;
    ++operands;
    EXPECT_TRUE(saved[i].bf16_alone) << "tensor " << i;
  }
  EXPECT_EQ(operands, 7);  // ln_1, qkv, probabilities, attention output, ln_2, GELU in and out
}

// The engine plans bf16 operands and the compute type by one rule; a model
// whose plan and compute disagree refuses the pass (a GEMM would read fp32
// copies nobody wrote) instead of training on garbage.
TEST(Bf16Operands, APassWhoseComputeDoesNotMatchThePlanIsAnError) {
  ActivationOptions planned;
  planned.bf16_operands = true;
  Rank rank(kGpt, MakeConfig(2, 1, "bf16"), planned);  // the layers multiply in fp32
  std::vector<Instruction> program = TrainSchedule(1);
  ASSERT_TRUE(PrepareProgram(&program, 1, rank.model->activation_slots()).ok());
  StepRecord record;
  const Status st = rank.Run(program, 2, 0, &record);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ActivationOptions::bf16_operands"), std::string::npos)
      << st.message();
  rank.model->SetComputeType(ComputeType::kBf16);  // the plan's compute: it runs
  EXPECT_TRUE(rank.Run(program, 2, 0, &record).ok());
}

INSTANTIATE_TEST_SUITE_P(
    Models, ExecutorPrograms,
    ::testing::Values(Case{"gpt_fp32", kGpt, ""}, Case{"sequential_fp32", kSequential, ""},
                      Case{"gpt_fp16", kGpt, "fp16"}, Case{"gpt_bf16", kGpt, "bf16"},
                      Case{"sequential_bf16", kSequential, "bf16"},
                      Case{"gpt_bf16_compute", kGpt, "bf16", ComputeType::kBf16}),
    [](const auto &info) { return std::string(info.param.name); });

// ---------------------------------------------------------------- ranges

// Layers [0, k) then [k, L) with the boundary activation passed by the
// caller (what two pipeline stages do) give the whole model's loss and
// gradients bit for bit.
TEST(ModelRanges, TwoRangesEqualTheWholeModel) {
  omp_set_num_threads(1);
  const ModelSpec spec = Spec(kGpt);
  const int64_t B = 2, T = 8, C = spec.lm.d_model;
  MemoryTracker tracker;
  Model<float> whole(spec, {B, T, 1}, &tracker), split(spec, {B, T, 1}, &tracker);
  std::vector<int32_t> tokens(size_t(B * T)), targets(size_t(B * T));
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = int32_t((i * 11) % 64);
    targets[i] = int32_t((i * 3 + 1) % 64);
  }
  MicroBatch<float> mb;
  mb.B = B, mb.seq = T, mb.tokens = tokens.data(), mb.targets = targets.data();
  Result<double> loss = whole.Forward(mb);
  ASSERT_TRUE(loss.ok());
  ASSERT_TRUE(whole.Backward(mb).ok());

  const size_t k = 2;  // embedding + first block | second block + head
  const LayerRange first{0, k}, second{k, split.layers().size()};
  const float *boundary = nullptr;
  ASSERT_TRUE(split.Forward(0, first, nullptr, mb, nullptr, &boundary).ok());
  std::vector<float> received(boundary, boundary + B * T * C);  // "sent" to the next stage
  ASSERT_TRUE(split.Forward(0, second, received.data(), mb, nullptr).ok());
  EXPECT_EQ(split.Loss(0), loss.value());
  std::vector<float> grad_boundary(size_t(B * T * C));
  ASSERT_TRUE(split.Backward(0, second, nullptr, grad_boundary.data(), mb, nullptr).ok());
  ASSERT_TRUE(split.Backward(0, first, grad_boundary.data(), nullptr, mb, nullptr).ok());
  const size_t n = size_t(whole.params().size());
  EXPECT_EQ(std::memcmp(whole.params().grads(), split.params().grads(), n * sizeof(float)), 0);
}

// A hook that fails stops the pass at that layer: later layers do not run.
TEST(ModelHooks, AFailingHookStopsThePassWhereItHappened) {
  struct FailAt final : LayerHooks {
    size_t fail_forward = 99, fail_backward = 99;
    std::vector<size_t> forwards, backwards;
    Status BeforeForward(size_t layer) override {
      if (layer == fail_forward)
        return Status(Code::kComm, "gather of layer " + std::to_string(layer));
      forwards.push_back(layer);
      return Status::Ok();
    }
    Status AfterBackward(size_t layer) override {
      if (layer == fail_backward)
        return Status(Code::kComm, "reduce of layer " + std::to_string(layer));
      backwards.push_back(layer);
      return Status::Ok();
    }
  };
  const ModelSpec spec = Spec(kGpt);
  MemoryTracker tracker;
  Model<float> model(spec, {1, 8, 1}, &tracker);
  std::vector<int32_t> tokens(8, 1), targets(8, 2);
  MicroBatch<float> mb;
  mb.B = 1, mb.seq = 8, mb.tokens = tokens.data(), mb.targets = targets.data();
  FailAt hooks;
  hooks.fail_forward = 2;
  Result<double> loss = model.Forward(mb, &hooks);
  ASSERT_FALSE(loss.ok());
  EXPECT_NE(loss.status().message().find("gather of layer 2"), std::string::npos);
  EXPECT_EQ(hooks.forwards, (std::vector<size_t>{0, 1}));
  hooks.fail_forward = 99;
  hooks.fail_backward = 2;
  ASSERT_TRUE(model.Forward(mb, &hooks).ok());
  Status st = model.Backward(mb, &hooks);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("reduce of layer 2"), std::string::npos);
  EXPECT_EQ(hooks.backwards, (std::vector<size_t>{3}));  // the head ran, block 1 failed
}

}  // namespace
}  // namespace dst
