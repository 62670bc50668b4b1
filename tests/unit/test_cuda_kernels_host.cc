// The CUDA kernel backend's host half (core/device/cuda_kernels.cc) over a
// recording kernel table, on any machine: which table entries each
// Kernels<float> and StepKernels call turns into (the optimizer's constants
// as CPU-Adam computes them), with which sizes, pitches and codes; the
// first failure kept, named and cleared; the context made and closed. The
// device half runs in tests/gpu/test_cuda_kernel_backend.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/kernels/cpu/cpu_adam.h"
#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/device/cuda_kernels.h"
#include "tests/common/one_rank.h"

namespace dst {
namespace {

// What the fake table saw: one line per call ("entry a b c ...").
std::vector<std::string> g_calls;
int g_fail_entry_code = 0;      // the code every entry returns (0: success)
DstCudaAdamConstants g_adam{};  // the last adam call's constants
DstCudaSgdConstants g_sgd{};    // the last sgd call's
int g_context = 42;

template <typename... Args>
int Record(const char *entry, Args... args) {
  std::string line = entry;
  ((line += " " + std::to_string(args)), ...);
  g_calls.push_back(line);
  return g_fail_entry_code;
}

DstCudaKernelTable FakeTable() {
  DstCudaKernelTable t{};
  t.size = sizeof t;
  t.context_create = [](int device, void *, void **ctx) {
    *ctx = &g_context;
    return Record("context_create", device);
  };
  t.context_destroy = [](void *ctx) { return Record("context_destroy", ctx == &g_context); };
  t.error_string = [](int code) {
    static std::string text;
    text = "fake error " + std::to_string(code);
    return text.c_str();
  };
  t.copy_rows = [](void *, const void *, size_t sp, size_t rows, size_t width, void *, size_t dp) {
    return Record("copy_rows", sp, rows, width, dp);
  };
  t.zero = [](void *, void *, size_t bytes) { return Record("zero", bytes); };
  t.round_to_16 = [](void *, int half, float *, long n) { return Record("round_to_16", half, n); };
  t.stash_to_16 = [](void *, int half, float *, long n, uint16_t *) {
    return Record("stash_to_16", half, n);
  };
  t.unstash_from_16 = [](void *, int half, const uint16_t *, long n, float *) {
    return Record("unstash_from_16", half, n);
  };
  t.add = [](void *, const float *, const float *, long n, float *) { return Record("add", n); };
  t.add_in_place = [](void *, const float *, long n, float *) { return Record("add_in_place", n); };
  t.add_bias_to_rows = [](void *, const float *, long rows, long out, float *) {
    return Record("add_bias_to_rows", rows, out);
  };
  t.gelu_forward = [](void *, const float *, long n, float *) { return Record("gelu_forward", n); };
  t.gelu_backward = [](void *, const float *, const float *, long n, float *) {
    return Record("gelu_backward", n);
  };
  t.relu_forward = [](void *, const float *, long n, float *) { return Record("relu_forward", n); };
  t.relu_backward = [](void *, const float *, const float *, long n, float *) {
    return Record("relu_backward", n);
  };
  t.linear_forward = [](void *, const float *, const float *, const float *bias, long rows, long in,
                        long out, float *, int compute) {
    return Record("linear_forward", bias != nullptr, rows, in, out, compute);
  };
  t.linear_input_backward = [](void *, const float *, const float *, long rows, long in, long out,
                               float *, int compute) {
    return Record("linear_input_backward", rows, in, out, compute);
  };
  t.linear_weight_backward = [](void *, const float *, const float *, long rows, long in, long out,
                                float *, float *dbias, int compute) {
    return Record("linear_weight_backward", rows, in, out, dbias != nullptr, compute);
  };
  t.layernorm_forward = [](void *, const float *, const float *, const float *, long rows, long C,
                           float *, float *,
                           float *) { return Record("layernorm_forward", rows, C); };
  t.layernorm_backward = [](void *, const float *, const float *, const float *weight,
                            const float *, const float *, long rows, long C, float *dx,
                            float *dweight, float *dbias) {
    return Record("layernorm_backward", rows, C, weight != nullptr, dx != nullptr,
                  dweight != nullptr, dbias != nullptr);
  };
  t.attention_forward = [](void *, const float *, long B, long T, long C, long H, float *,
                           float *) { return Record("attention_forward", B, T, C, H); };
  t.attention_backward = [](void *, const float *, const float *, const float *, long B, long T,
                            long C, long H,
                            float *) { return Record("attention_backward", B, T, C, H); };
  t.embedding_lookup = [](void *, const int32_t *, const float *, long first, long rows, long B,
                          long T, long C,
                          float *) { return Record("embedding_lookup", first, rows, B, T, C); };
  t.add_positions_to_rows = [](void *, const float *, long first_row, long rows, long T, long C,
                               float *) {
    return Record("add_positions_to_rows", first_row, rows, T, C);
  };
  t.embedding_backward = [](void *, const float *, const int32_t *, long B, long T, long C, float *,
                            float *, long first, long rows) {
    return Record("embedding_backward", B, T, C, first, rows);
  };
  t.cross_entropy_forward = [](void *, float *, const int32_t *, long rows, long V, double *loss,
                               long *counted) {
    *loss = 2.5;
    *counted = rows - 1;
    return Record("cross_entropy_forward", rows, V);
  };
  t.cross_entropy_backward = [](void *, const float *, const int32_t *, long rows, long V,
                                long counted, float, float *, long first) {
    return Record("cross_entropy_backward", rows, V, counted, first);
  };
  t.row_maxima = [](void *, const float *, long rows, long V, float *) {
    return Record("row_maxima", rows, V);
  };
  t.exp_and_sums = [](void *, float *, long rows, long V, const float *, long parts,
                      const int32_t *, long first, float *,
                      float *) { return Record("exp_and_sums", rows, V, parts, first); };
  t.normalize_and_nll = [](void *, float *, long rows, long V, const float *, const float *,
                           const int32_t *, double *loss, long *counted) {
    *loss = 1.25;
    *counted = rows;
    return Record("normalize_and_nll", rows, V);
  };
  t.mse_forward = [](void *, const float *, const float *, long n, double *loss) {
    *loss = 0.5;
    return Record("mse_forward", n);
  };
  t.mse_backward = [](void *, const float *, const float *, long n, float, float *,
                      long mean_over) { return Record("mse_backward", n, mean_over); };
  t.scale = [](void *, float k, long n, float *) { return Record("scale", int(k * 100), n); };
  t.sum_of_squares = [](void *, const float *, long n, double *sum) {
    *sum = 9.0;
    return Record("sum_of_squares", n);
  };
  t.adam = [](void *, float *, const float *, float *, float *, long n,
              const DstCudaAdamConstants *k, uint16_t *half_out, int half) {
    g_adam = *k;
    return Record("adam", n, half_out != nullptr, half);
  };
  t.sgd = [](void *, const float *, long n, const DstCudaSgdConstants *k, float *,
             float *momentum) {
    g_sgd = *k;
    return Record("sgd", n, momentum != nullptr);
  };
  t.narrow_16 = [](void *, int half, const float *, long n, uint16_t *) {
    return Record("narrow_16", half, n);
  };
  t.add_into_16 = [](void *, int half, const float *, long n, uint16_t *) {
    return Record("add_into_16", half, n);
  };
  t.add_wide_16 = [](void *, int half, const uint16_t *, long n, float *) {
    return Record("add_wide_16", half, n);
  };
  t.sum_16 = [](void *, int half, const uint16_t *, long n, uint16_t *) {
    return Record("sum_16", half, n);
  };
  t.sum_of_squares_16 = [](void *, int half, const uint16_t *, long n, double *sum) {
    *sum = 4.0;
    return Record("sum_of_squares_16", half, n);
  };
  t.fill_columns = [](void *, float *, long rows, long width, long begin, float) {
    return Record("fill_columns", rows, width, begin);
  };
  t.cross_entropy_forward_into = [](void *, float *, const int32_t *, long rows, long V, double *) {
    return Record("cross_entropy_forward_into", rows, V);
  };
  t.normalize_and_nll_into = [](void *, float *, long rows, long V, const float *, const float *,
                                const int32_t *,
                                double *) { return Record("normalize_and_nll_into", rows, V); };
  t.set_attention_gemm = [](void *, int enabled) { return Record("set_attention_gemm", enabled); };
  t.attention_forward_compute = [](void *, const float *, const DstCudaAttentionShape *s, float *,
                                   float *, int compute) {
    return Record("attention_forward_compute", s->B, s->T, s->kv_heads, compute);
  };
  t.attention_backward_compute = [](void *, const float *, const float *, const float *,
                                    const DstCudaAttentionShape *s, float *, int compute) {
    return Record("attention_backward_compute", s->B, s->T, s->kv_heads, compute);
  };
  return t;
}

class CudaKernelsHost : public ::testing::Test {
 protected:
  void SetUp() override {
    g_calls.clear();
    g_fail_entry_code = 0;
    Result<std::unique_ptr<CudaKernels>> k = CudaKernels::WithTable(table_, 3, nullptr);
    ASSERT_TRUE(k.ok()) << k.status().message();
    kernels_ = std::move(k.value());
    EXPECT_EQ(g_calls, std::vector<std::string>{"context_create 3"});
    g_calls.clear();
  }
  const DstCudaKernelTable table_ = FakeTable();
  std::unique_ptr<CudaKernels> kernels_;
  float x_[4] = {}, y_[4] = {};
  int32_t t_[4] = {};
};

TEST_F(CudaKernelsHost, NamesItsDeviceAndClosesItsContext) {
  EXPECT_STREQ(kernels_->name(), "cuda:3");
  kernels_.reset();
  EXPECT_EQ(g_calls, std::vector<std::string>{"context_destroy 1"});
}

TEST_F(CudaKernelsHost, CopiesInBytesWithPitches) {
  kernels_->Copy(x_, 5, y_);
  kernels_->CopyRows(x_, 10, 3, 4, y_, 7);
  kernels_->Zero(6, y_);
  EXPECT_EQ(g_calls,
            (std::vector<std::string>{"copy_rows 20 1 20 20", "copy_rows 40 3 16 28", "zero 24"}));
}

TEST_F(CudaKernelsHost, TheLinearBackwardRunsOnlyTheHalvesAsked) {
  kernels_->LinearBackward(x_, x_, x_, 8, 4, 6, y_, nullptr, nullptr, ComputeType::kFp32);
  kernels_->LinearBackward(x_, x_, x_, 8, 4, 6, nullptr, y_, y_, ComputeType::kBf16);
  kernels_->LinearBackward(x_, x_, x_, 8, 4, 6, y_, y_, nullptr, ComputeType::kFp32);
  kernels_->LinearForward(x_, x_, nullptr, 8, 4, 6, y_, ComputeType::kBf16);
  EXPECT_EQ(g_calls, (std::vector<std::string>{
                         "linear_input_backward 8 4 6 0", "linear_weight_backward 8 4 6 1 1",
                         "linear_input_backward 8 4 6 0", "linear_weight_backward 8 4 6 0 0",
                         "linear_forward 0 8 4 6 1"}));
}

TEST_F(CudaKernelsHost, TheEmbeddingIsALookupThenThePositions) {
  kernels_->EmbeddingForward(t_, x_, x_, 2, 8, 16, y_);
  kernels_->EmbeddingLookupRange(t_, x_, 32, 16, 2, 8, 16, y_);
  kernels_->AddPositionsToRows(x_, 4, 4, 8, 16, y_);
  ASSERT_EQ(g_calls.size(), 4u);
  EXPECT_EQ(g_calls[0].rfind("embedding_lookup 0 ", 0), 0u) << g_calls[0];  // every row
  EXPECT_EQ(g_calls[1], "add_positions_to_rows 0 16 8 16");
  EXPECT_EQ(g_calls[2], "embedding_lookup 32 16 2 8 16");
  EXPECT_EQ(g_calls[3], "add_positions_to_rows 4 4 8 16");
}

TEST_F(CudaKernelsHost, LayerNormsParameterHalfPassesNoInputGradient) {
  kernels_->LayerNormBackward(x_, x_, x_, x_, x_, 5, 16, y_, y_, y_, nullptr, 1);
  kernels_->LayerNormBackward(x_, x_, x_, x_, x_, 5, 16, y_, nullptr, nullptr, nullptr, 1);
  kernels_->LayerNormParamBackward(x_, x_, x_, x_, 5, 16, y_, y_, nullptr, 1);
  EXPECT_EQ(g_calls, (std::vector<std::string>{"layernorm_backward 5 16 1 1 1 1",
                                               "layernorm_backward 5 16 1 1 0 0",
                                               "layernorm_backward 5 16 0 0 1 1"}));
}

TEST_F(CudaKernelsHost, SixteenBitFormatsAndLossesCrossTheTable) {
  kernels_->RoundTo16(Half::kBf16, y_, 4);
  uint16_t stash[4];
  kernels_->StashTo16(Half::kFp16, y_, 4, stash);
  kernels_->UnstashFrom16(Half::kBf16, stash, 4, y_);
  int64_t counted = 0;
  EXPECT_EQ(kernels_->SoftmaxCrossEntropyForward(y_, t_, 4, 9, &counted), 2.5);
  EXPECT_EQ(counted, 3);
  EXPECT_EQ(kernels_->NormalizeAndNll(y_, 4, 9, x_, x_, t_, &counted), 1.25);
  EXPECT_EQ(counted, 4);
  EXPECT_EQ(kernels_->MseForward(x_, x_, 4), 0.5);
  double sum = 0;  // the deferred forwards: queued, nothing comes back
  kernels_->SoftmaxCrossEntropyForwardInto(y_, t_, 4, 9, &sum);
  kernels_->NormalizeAndNllInto(y_, 4, 9, x_, x_, t_, &sum);
  EXPECT_EQ(g_calls, (std::vector<std::string>{
                         "round_to_16 1 4", "stash_to_16 0 4", "unstash_from_16 1 4",
                         "cross_entropy_forward 4 9", "normalize_and_nll 4 9", "mse_forward 4",
                         "cross_entropy_forward_into 4 9", "normalize_and_nll_into 4 9"}));
  EXPECT_TRUE(kernels_->TakeError().ok());
}

TEST_F(CudaKernelsHost, TheFirstFailureIsKeptNamedAndCleared) {
  g_fail_entry_code = 5;
  kernels_->Add(x_, x_, 4, y_);
  g_fail_entry_code = 7;
  kernels_->GeluForward(x_, 4, y_);
  g_fail_entry_code = 0;
  kernels_->ReluForward(x_, 4, y_);
  const Status st = kernels_->TakeError();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "CUDA kernel Add on cuda:3: fake error 5");
  EXPECT_TRUE(kernels_->TakeError().ok());
  EXPECT_EQ(g_calls.size(), 3u);  // later calls still run: the stream decides what they do
}

// A model over a failing backend stops its pass at the layer and names the
// kernel (the fake table touches no memory: the model's buffers are host ones).
TEST_F(CudaKernelsHost, AModelStopsAtAFailedKernelAndNamesIt) {
  Result<ModelSpec> spec = ParseModelSpec(
      R"({"type":"gpt","vocab_size":16,"n_ctx":4,"n_layer":1,"n_head":1,"d_model":8,"seed":1})");
  ASSERT_TRUE(spec.ok());
  Model<float> model(spec.value(), {1, 4, 1}, nullptr);
  model.SetKernels(*kernels_);
  int32_t ids[8] = {1, 2, 3, 4, 2, 3, 4, 5};
  MicroBatch<float> mb;
  mb.B = 1;
  mb.seq = 4;
  mb.tokens = ids;
  mb.targets = ids + 4;
  ASSERT_TRUE(model.Forward(mb).ok());  // every entry succeeds
  g_calls.clear();
  g_fail_entry_code = 11;
  const Result<double> loss = model.Forward(mb);
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().message(), "CUDA kernel EmbeddingLookup on cuda:3: fake error 11");
  EXPECT_EQ(g_calls.size(), 2u) << "the pass stops after the embedding layer (lookup, positions)";
  g_fail_entry_code = 0;
  EXPECT_TRUE(model.Forward(mb).ok()) << "the failure is not sticky once reported";
}

// Where the plugin's fused attention takes the shape (head size <= 128,
// B x H <= 65535) the backend keeps no probabilities, and a GPT block built
// for it saves no T x T tensor (B x H x T x T floats a layer) and sizes no
// [threads, T, T] backward scratch.
TEST_F(CudaKernelsHost, TheFusedAttentionsShapesSaveNoProbabilities) {
  EXPECT_FALSE(kernels_->KeepsAttentionProbabilities({8, 1024, 768, 12}));  // GPT-2
  EXPECT_TRUE(kernels_->KeepsAttentionProbabilities({1, 4, 512, 2}));       // head size 256
  EXPECT_TRUE(kernels_->KeepsAttentionProbabilities({6000, 4, 768, 12}));   // B x H > 65535
  EXPECT_TRUE(HostKernels<float>().KeepsAttentionProbabilities({8, 1024, 768, 12}));

  // (The vocabulary unpadded: the blocks' backward scratch is then the
  // model's largest, not the head's.)
  Result<ModelSpec> spec = ParseModelSpec(
      R"({"type":"gpt","vocab_size":16,"n_ctx":8,"n_layer":2,"n_head":2,"d_model":8,"seed":1,
          "make_vocab_size_divisible_by":1})");
  ASSERT_TRUE(spec.ok());
  MemoryTracker kept, fused;
  ActivationLimits limits{2, 8, 1};
  Model<float> with(spec.value(), limits, &kept);
  limits.attention_probabilities = false;
  Model<float> without(spec.value(), limits, &fused);
  const int64_t probabilities = 2 /*layers*/ * 2 /*B*/ * 2 /*H*/ * 8 * 8 * int64_t(sizeof(float));
  const int64_t scratch = 1 /*thread*/ * 8 * 8 * int64_t(sizeof(float));
  EXPECT_EQ(
      kept.Current(MemoryCategory::kActivations) - fused.Current(MemoryCategory::kActivations),
      probabilities + scratch);
}

// The batched-GEMM attention: chosen once for the largest micro-batch
// (GPT-2's head layout, B x H x T x T floats within 1 GiB, or as
// DSTRAIN_CUDA_ATTENTION says), told to the plugin, and every shape's
// probabilities then kept (a smaller micro-batch cannot change the choice).
TEST_F(CudaKernelsHost, TheGemmAttentionIsChosenOnceForTheLargestShape) {
  const AttentionShape gpt2{8, 1024, 768, 12};
  AttentionShape bloom = gpt2, gqa = gpt2;
  bloom.interleaved = true;
  bloom.alibi_heads = 12;
  gqa.kv_heads = 4;
  EXPECT_TRUE(CudaGemmAttentionFor(gpt2));
  EXPECT_FALSE(CudaGemmAttentionFor({64, 1024, 768, 12}));  // 3 GiB of probabilities a layer
  EXPECT_FALSE(CudaGemmAttentionFor(bloom));
  EXPECT_FALSE(CudaGemmAttentionFor(gqa));

  kernels_->ChooseAttention({64, 1024, 768, 12});
  EXPECT_FALSE(kernels_->KeepsAttentionProbabilities({1, 16, 768, 12}));  // the fused kernel's
  kernels_->ChooseAttention(gpt2);
  EXPECT_TRUE(kernels_->KeepsAttentionProbabilities(gpt2));
  EXPECT_TRUE(kernels_->KeepsAttentionProbabilities({1, 16, 768, 12}));
  EXPECT_FALSE(kernels_->KeepsAttentionProbabilities(bloom));  // the fused kernel's layouts
  EXPECT_EQ(g_calls, (std::vector<std::string>{"set_attention_gemm 0", "set_attention_gemm 1"}));
  EXPECT_TRUE(kernels_->TakeError().ok());

  setenv("DSTRAIN_CUDA_ATTENTION", "fused", 1);
  EXPECT_FALSE(CudaGemmAttentionFor(gpt2));
  setenv("DSTRAIN_CUDA_ATTENTION", "gemm", 1);
  EXPECT_TRUE(CudaGemmAttentionFor({64, 1024, 768, 12}));
  EXPECT_FALSE(CudaGemmAttentionFor(bloom));
  setenv("DSTRAIN_CUDA_ATTENTION", "flash", 1);
  kernels_->ChooseAttention(gpt2);
  const Status st = kernels_->TakeError();
  unsetenv("DSTRAIN_CUDA_ATTENTION");
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("DSTRAIN_CUDA_ATTENTION=flash: expected auto"), std::string::npos)
      << st.message();
}

// The attention goes through the compute entries (every head layout), the
// layer's compute type with it: the GEMM path's bf16 products need it.
TEST_F(CudaKernelsHost, AttentionCarriesTheLayersComputeType) {
  AttentionShape gqa{2, 8, 16, 4};
  gqa.kv_heads = 2;
  kernels_->AttentionForward(x_, {2, 8, 16, 2}, y_, y_, ComputeType::kBf16);
  kernels_->AttentionBackward(x_, x_, x_, gqa, y_, nullptr, ComputeType::kFp32);
  EXPECT_EQ(g_calls, (std::vector<std::string>{"attention_forward_compute 2 8 2 1",
                                               "attention_backward_compute 2 8 2 0"}));
  EXPECT_TRUE(kernels_->TakeError().ok());
}

TEST_F(CudaKernelsHost, TheStepCallsCrossTheTableWithCpuAdamsConstants) {
  const StepKernels &step = *kernels_;
  step.ScaleRange(0.25f, 7, y_);
  EXPECT_EQ(step.SumOfSquaresRange(x_, 7), 9.0);
  const AdamHyper adam{0.01, 0.9, 0.99, 1e-8, 0.1, 3, true};
  AdamRange range;
  range.n = 5;
  range.grad_mul = 0.5f;
  step.AdamUpdate(range, adam);
  uint16_t half[4];
  range.half_out = half;
  range.half = Half::kFp16;
  step.AdamUpdate(range, adam);
  const math::AdamConstants want = cpu::AdamConstantsFor(adam, 0.5f);
  EXPECT_EQ(g_adam.step_size, want.step_size);
  EXPECT_EQ(g_adam.bias2_sqrt, want.bias2_sqrt);
  EXPECT_EQ(g_adam.decay, want.decay);
  EXPECT_EQ(g_adam.l2, 0.0f);
  EXPECT_EQ(g_adam.grad_mul, 0.5f);
  step.SgdUpdate(x_, 6, SgdHyper{0.1, 0.0, 0.0, 0.0, false, true}, y_, y_);
  EXPECT_EQ(g_sgd.momentum, 0.0f);
  step.SgdUpdate(x_, 6, SgdHyper{0.1, 0.9, 0.25, 0.01, true, false}, y_, y_);
  EXPECT_EQ(g_sgd.damp, 0.75f);
  EXPECT_EQ(g_sgd.nesterov, 1);
  EXPECT_EQ(g_sgd.first_step, 0);
  step.ZeroRange(3, y_);
  step.CopyRange(x_, 2, y_);
  EXPECT_EQ(g_calls,
            (std::vector<std::string>{"scale 25 7", "sum_of_squares 7", "adam 5 0 1", "adam 5 1 0",
                                      "sgd 6 0", "sgd 6 1", "zero 12", "copy_rows 8 1 8 8"}));
  g_calls.clear();
  uint16_t h16[4] = {};
  step.AddRange(x_, 3, y_);
  step.CopyBytes(x_, 6, y_);
  step.Widen16(Half::kBf16, h16, 4, y_);
  step.Narrow16(Half::kFp16, x_, 4, h16);
  step.AddInto16(Half::kBf16, x_, 4, h16);
  step.AddWide16(Half::kFp16, h16, 4, y_);
  step.Sum16(Half::kBf16, h16, 4, h16);
  EXPECT_EQ(step.SumOfSquares16(Half::kBf16, h16, 4), 4.0);
  EXPECT_EQ(g_calls,
            (std::vector<std::string>{"add_in_place 3", "copy_rows 6 1 6 6", "unstash_from_16 1 4",
                                      "narrow_16 0 4", "add_into_16 1 4", "add_wide_16 0 4",
                                      "sum_16 1 4", "sum_of_squares_16 1 4"}));
  g_fail_entry_code = 4;
  EXPECT_TRUE(std::isnan(step.SumOfSquaresRange(x_, 7)));
  EXPECT_EQ(step.TakeError().message(), "CUDA kernel SumOfSquaresRange on cuda:3: fake error 4");
}

// A training step over a failing step backend stops and names the kernel
// (the fake table touches no memory: the buffers are host ones).
TEST_F(CudaKernelsHost, AStepStopsAtAFailedStepKernelAndNamesIt) {
  Result<Config> config = ParseConfig(R"({"train_micro_batch_size_per_gpu": 1,
      "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}})",
                                      ConfigContext{});
  ASSERT_TRUE(config.ok()) << config.status().message();
  RankPlacement placement;
  placement.step.kernels = kernels_.get();
  placement.kernels = kernels_.get();
  Rank rank(
      R"({"type":"gpt","vocab_size":16,"n_ctx":4,"n_layer":1,"n_head":1,"d_model":8,"seed":1})",
      config.value(), ActivationOptions{}, placement);
  std::vector<Instruction> program = TrainSchedule(1);
  ASSERT_TRUE(PrepareProgram(&program, 1, rank.model->activation_slots()).ok());
  StepRecord record;
  ASSERT_TRUE(rank.Run(program, 1, 0, &record).ok());  // every entry succeeds
  EXPECT_NE(std::find(g_calls.begin(), g_calls.end(),
                      "sum_of_squares " + std::to_string(rank.model->params().size())),
            g_calls.end());
  g_calls.clear();
  g_fail_entry_code = 6;
  const Status st = rank.Run(program, 1, 1, &record);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("CUDA kernel"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("fake error 6"), std::string::npos) << st.message();
}

TEST(CudaKernelsHostCreate, AFailedContextIsNamed) {
  DstCudaKernelTable t = FakeTable();
  t.context_create = [](int, void *, void **) { return 9; };
  Result<std::unique_ptr<CudaKernels>> k = CudaKernels::WithTable(t, 1, nullptr);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(), "creating the CUDA kernel backend on cuda:1: fake error 9");
}

}  // namespace
}  // namespace dst
