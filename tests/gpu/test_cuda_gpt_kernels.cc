// The GPT's CUDA kernels (core/kernels/cuda/gpt_kernels.cu) and cuBLASLt
// GEMMs (gemm.cu) against the CPU kernels on random inputs. fp32 results
// within 1e-5 of the CPU's scale (different summation orders and exp
// implementations); TF32 within its 10-bit mantissa; bf16 / fp16 operands
// against the CPU product of the same rounded operands. Skipped without a
// plugin or device ("skipped: no CUDA device").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <omp.h>
#include <string>
#include <vector>

#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/embedding.h"
#include "core/kernels/cpu/gemm.h"
#include "core/kernels/cpu/loss.h"
#include "core/precision/convert.h"
#include "core/kernels/cuda/cuda_kernel_table.h"
#include "core/zero/storage.h"
#include "tests/gpu/gpu_test_support.h"

namespace dst {
namespace {

using EmbeddingFn = int (*)(const int32_t *tokens, const float *wte, const float *wpe, long B,
                            long T, long C, long V, long max_T, const float *dout, float *out,
                            float *dwte, float *dwpe, char *err, size_t cap);
using CrossEntropyFn = int (*)(const float *logits, const int32_t *targets, long rows, long V,
                               float grad_scale, float *probs, float *loss, long *counted,
                               float *dlogits, char *err, size_t cap);
using CrossEntropyFusedFn = int (*)(const float *logits, const int32_t *targets, long rows, long V,
                                    float grad_scale, float *loss, long *counted, float *dlogits,
                                    char *err, size_t cap);
using AttentionFn = int (*)(const float *qkv, const float *dy, long B, long T, long C, long H,
                            float *att, float *y, float *dqkv, char *err, size_t cap);
using FlashAttentionFn = int (*)(const float *qkv, const float *dy, long B, long T, long C, long H,
                                 float *y, float *lse, float *dqkv, char *err, size_t cap);
using FlashAttentionShapeFn = int (*)(const float *qkv, const float *dy,
                                      const DstCudaAttentionShape *shape, float *y, float *lse,
                                      float *dqkv, char *err, size_t cap);
using GradStatsFn = int (*)(const float *x, long n, double *sum_squares, long *nonfinite, char *err,
                            size_t cap);
using GemmFn = int (*)(int type, int trans_a, int trans_b, long m, long n, long k, float alpha,
                       const float *a, long lda, const float *b, long ldb, float beta, float *c,
                       long ldc, char *err, size_t cap);

// The index of the first element farther than tol x (the reference's largest
// magnitude) from the reference, or the size when none is.
size_t FirstFar(const std::vector<float> &got, const std::vector<float> &want, float tol) {
  float scale = 1e-30f;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * scale)) return i;
  return want.size();
}

std::vector<int32_t> Tokens(size_t n, int32_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, V - 1);
  std::vector<int32_t> t(n);
  for (int32_t &x : t) x = pick(rng);
  return t;
}

// Embedding forward and backward at [B, T] tokens of a [V, C] table and
// [max_T, C] positions, against the CPU kernels.
void CheckEmbedding(EmbeddingFn fn, long B, long T, long C, long V, long max_T) {
  const std::vector<int32_t> tokens = Tokens(size_t(B * T), int32_t(V), 20);
  const std::vector<float> wte = Random(size_t(V * C), 1.0f, 21);
  const std::vector<float> wpe = Random(size_t(max_T * C), 1.0f, 22);
  const std::vector<float> dout = Random(size_t(B * T * C), 1.0f, 23);
  std::vector<float> out(size_t(B * T * C)), dwte = Random(wte.size(), 0.1f, 24);
  std::vector<float> dwpe = Random(wpe.size(), 0.1f, 25);
  std::vector<float> g_out = out, g_dwte = dwte, g_dwpe = dwpe;
  char err[512] = {};
  const int rc = fn(tokens.data(), wte.data(), wpe.data(), B, T, C, V, max_T, dout.data(),
                    g_out.data(), g_dwte.data(), g_dwpe.data(), err, sizeof err);
  DST_GPU_CHECK_RC(rc, err);
  cpu::EmbeddingForward(tokens.data(), wte.data(), wpe.data(), B, T, C, out.data());
  cpu::EmbeddingBackward(dout.data(), tokens.data(), B, T, C, dwte.data(), dwpe.data());
  EXPECT_EQ(FirstFar(g_out, out, 0.0f), out.size()) << "T=" << T;  // one addition: exact
  EXPECT_EQ(FirstFar(g_dwte, dwte, 1e-5f), dwte.size()) << "T=" << T;
  EXPECT_EQ(FirstFar(g_dwpe, dwpe, 1e-5f), dwpe.size()) << "T=" << T;
}

TEST(CudaGptKernels, EmbeddingMatchesTheCpuKernels) {
  const auto fn = Plugin().Symbol<EmbeddingFn>("dst_cuda_plugin_embedding");
  DST_GPU_SKIP_IF_ABSENT(fn);
  CheckEmbedding(fn, 3, 17, 40, 50, 32);  // tokens repeat
}

// GPT-2 124M's table and context (50257 x 768, 1024 positions).
TEST(CudaGptKernels, EmbeddingMatchesTheCpuKernelsAtGpt2Shapes) {
  const auto fn = Plugin().Symbol<EmbeddingFn>("dst_cuda_plugin_embedding");
  DST_GPU_SKIP_IF_ABSENT(fn);
  CheckEmbedding(fn, 2, 1024, 768, 50257, 1024);
}

// The CPU's softmax cross-entropy of logits [rows, V] (loss, rows counted,
// probabilities and dlogits with grad_scale): the reference of both CUDA forms.
struct CpuCrossEntropy {
  float loss = 0;
  int64_t counted = 0;
  std::vector<float> probs, dlogits;
  CpuCrossEntropy(const std::vector<float> &logits, const std::vector<int32_t> &targets, long rows,
                  long V, float grad_scale)
      : probs(logits), dlogits(logits.size()) {
    loss = cpu::SoftmaxCrossEntropyForward(probs.data(), targets.data(), rows, V, &counted);
    cpu::SoftmaxCrossEntropyBackward(probs.data(), targets.data(), rows, V, counted, grad_scale,
                                     dlogits.data());
  }
};

TEST(CudaGptKernels, CrossEntropyMatchesTheCpuKernels) {
  const auto fn = Plugin().Symbol<CrossEntropyFn>("dst_cuda_plugin_cross_entropy");
  DST_GPU_SKIP_IF_ABSENT(fn);
  for (long V : {7L, 256L, 50257L}) {
    const long rows = 13;
    const std::vector<float> logits = Random(size_t(rows * V), 3.0f, 30);
    std::vector<int32_t> targets = Tokens(size_t(rows), int32_t(V), 31);
    targets[4] = cpu::kIgnoreIndex;
    std::vector<float> g_probs(logits.size()), g_dlogits(logits.size());
    float g_loss = 0;
    long g_counted = 0;
    char err[512] = {};
    const int rc = fn(logits.data(), targets.data(), rows, V, 0.5f, g_probs.data(), &g_loss,
                      &g_counted, g_dlogits.data(), err, sizeof err);
    DST_GPU_CHECK_RC(rc, err);
    const CpuCrossEntropy cpu(logits, targets, rows, V, 0.5f);
    EXPECT_EQ(g_counted, cpu.counted);
    EXPECT_NEAR(g_loss, cpu.loss, 1e-5f * std::fabs(cpu.loss)) << "V=" << V;
    EXPECT_EQ(FirstFar(g_probs, cpu.probs, 1e-5f), cpu.probs.size()) << "probabilities, V=" << V;
    EXPECT_EQ(FirstFar(g_dlogits, cpu.dlogits, 1e-5f), cpu.dlogits.size()) << "dlogits, V=" << V;
  }
}

// The fused cross-entropy (no probabilities in memory) against the CPU
// kernels: loss, the rows counted and dlogits, an ignored row included, at
// vocabularies below a block, across blocks and GPT-2's.
TEST(CudaGptKernels, FusedCrossEntropyMatchesTheCpuKernels) {
  const auto fn = Plugin().Symbol<CrossEntropyFusedFn>("dst_cuda_plugin_cross_entropy_fused");
  DST_GPU_SKIP_IF_ABSENT(fn);
  for (long V : {7L, 1000L, 3001L, 50257L}) {
    const long rows = 13;
    const std::vector<float> logits = Random(size_t(rows * V), 3.0f, 32);
    std::vector<int32_t> targets = Tokens(size_t(rows), int32_t(V), 33);
    targets[4] = cpu::kIgnoreIndex;
    std::vector<float> g_dlogits(logits.size());
    float g_loss = 0;
    long g_counted = 0;
    char err[512] = {};
    const int rc = fn(logits.data(), targets.data(), rows, V, 0.5f, &g_loss, &g_counted,
                      g_dlogits.data(), err, sizeof err);
    DST_GPU_CHECK_RC(rc, err);
    const CpuCrossEntropy cpu(logits, targets, rows, V, 0.5f);
    EXPECT_EQ(g_counted, cpu.counted);
    EXPECT_NEAR(g_loss, cpu.loss, 1e-5f * std::fabs(cpu.loss)) << "V=" << V;
    EXPECT_EQ(FirstFar(g_dlogits, cpu.dlogits, 1e-5f), cpu.dlogits.size()) << "dlogits, V=" << V;
  }
}

// Causal attention forward and backward on [B, T, 3C] packed q, k, v with H
// heads, against the CPU kernels.
void CheckAttention(AttentionFn fn, long B, long T, long C, long H) {
  const cpu::AttentionShape s{B, T, C, H};
  const std::vector<float> qkv = Random(size_t(B * T * 3 * C), 1.0f, 40);
  const std::vector<float> dy = Random(size_t(B * T * C), 1.0f, 41);
  std::vector<float> att(size_t(B * H * T * T)), y(size_t(B * T * C)), dqkv(qkv.size());
  std::vector<float> g_att = att, g_y = y, g_dqkv = dqkv, scratch(size_t(T * T));
  char err[512] = {};
  const int rc = fn(qkv.data(), dy.data(), B, T, C, H, g_att.data(), g_y.data(), g_dqkv.data(), err,
                    sizeof err);
  DST_GPU_CHECK_RC(rc, err);
  cpu::AttentionForward(qkv.data(), s, att.data(), y.data());
  cpu::AttentionBackward(dy.data(), qkv.data(), att.data(), s, dqkv.data(), scratch.data());
  EXPECT_EQ(FirstFar(g_att, att, 1e-5f), att.size()) << "att, T=" << T;
  EXPECT_EQ(FirstFar(g_y, y, 1e-5f), y.size()) << "y, T=" << T;
  EXPECT_EQ(FirstFar(g_dqkv, dqkv, 1e-5f), dqkv.size()) << "dqkv, T=" << T;
}

TEST(CudaGptKernels, CausalAttentionMatchesTheCpuKernels) {
  const auto fn = Plugin().Symbol<AttentionFn>("dst_cuda_plugin_attention");
  DST_GPU_SKIP_IF_ABSENT(fn);
  for (long T : {1L, 5L, 33L, 64L}) CheckAttention(fn, 2, T, 48, 3);
}

// The same contract through batched cuBLASLt GEMMs (attention_gemm.cu).
TEST(CudaGptKernels, GemmAttentionMatchesTheCpuKernels) {
  const auto fn = Plugin().Symbol<AttentionFn>("dst_cuda_plugin_attention_gemm");
  DST_GPU_SKIP_IF_ABSENT(fn);
  for (long T : {1L, 5L, 33L, 64L}) CheckAttention(fn, 2, T, 48, 3);
  CheckAttention(fn, 1, 70, 40, 2);  // hs 20
}

TEST(CudaGptKernels, GemmAttentionMatchesTheCpuKernelsAtGpt2Shapes) {
  const auto fn = Plugin().Symbol<AttentionFn>("dst_cuda_plugin_attention_gemm");
  DST_GPU_SKIP_IF_ABSENT(fn);
  CheckAttention(fn, 1, 1024, 768, 12);
}

// GPT-2 124M's layer: context 1024, 12 heads of 64.
TEST(CudaGptKernels, CausalAttentionMatchesTheCpuKernelsAtGpt2Shapes) {
  const auto fn = Plugin().Symbol<AttentionFn>("dst_cuda_plugin_attention");
  DST_GPU_SKIP_IF_ABSENT(fn);
  CheckAttention(fn, 1, 1024, 768, 12);
}

// The fused (FlashAttention-style) kernels against the CPU's attention: y and
// dqkv within 1e-5 of the CPU's scale, and lse = log sum_j exp(q_t.k_j /
// sqrt(hs)) per row against a double-precision sum. Head sizes 16 (exact
// fit), 20 (padded to 32) and 64; contexts across the tiles' edges.
void CheckFlashAttention(FlashAttentionFn fn, long B, long T, long C, long H) {
  const cpu::AttentionShape s{B, T, C, H};
  const long hs = C / H;
  const std::vector<float> qkv = Random(size_t(B * T * 3 * C), 1.0f, 42);
  const std::vector<float> dy = Random(size_t(B * T * C), 1.0f, 43);
  std::vector<float> g_y(size_t(B * T * C)), g_lse(size_t(B * H * T)), g_dqkv(qkv.size());
  char err[512] = {};
  const int rc = fn(qkv.data(), dy.data(), B, T, C, H, g_y.data(), g_lse.data(), g_dqkv.data(), err,
                    sizeof err);
  DST_GPU_CHECK_RC(rc, err);
  std::vector<float> att(size_t(B * H * T * T)), y(size_t(B * T * C)), dqkv(qkv.size());
  std::vector<float> scratch(size_t(T * T));
  cpu::AttentionForward(qkv.data(), s, att.data(), y.data());
  cpu::AttentionBackward(dy.data(), qkv.data(), att.data(), s, dqkv.data(), scratch.data());
  EXPECT_EQ(FirstFar(g_y, y, 1e-5f), y.size()) << "y, T=" << T << " hs=" << hs;
  EXPECT_EQ(FirstFar(g_dqkv, dqkv, 1e-5f), dqkv.size()) << "dqkv, T=" << T << " hs=" << hs;
  std::vector<float> lse(g_lse.size());
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h)
      for (long t = 0; t < T; ++t) {
        const float *q = &qkv[size_t((b * T + t) * 3 * C + h * hs)];
        double sum = 0, max = -1e300;
        std::vector<double> scores(size_t(t + 1));
        for (long j = 0; j <= t; ++j) {
          const float *k = &qkv[size_t((b * T + j) * 3 * C + C + h * hs)];
          double dot = 0;
          for (long d = 0; d < hs; ++d) dot += double(q[d]) * double(k[d]);
          scores[size_t(j)] = dot / std::sqrt(double(hs));
          max = std::max(max, scores[size_t(j)]);
        }
        for (double x : scores) sum += std::exp(x - max);
        lse[size_t((b * H + h) * T + t)] = float(max + std::log(sum));
      }
  EXPECT_EQ(FirstFar(g_lse, lse, 1e-5f), lse.size()) << "lse, T=" << T << " hs=" << hs;
}

TEST(CudaGptKernels, FlashAttentionMatchesTheCpuKernels) {
  const auto fn = Plugin().Symbol<FlashAttentionFn>("dst_cuda_plugin_flash_attention");
  DST_GPU_SKIP_IF_ABSENT(fn);
  for (long T : {1L, 5L, 31L, 32L, 33L, 64L, 65L, 130L}) CheckFlashAttention(fn, 2, T, 48, 3);
  CheckFlashAttention(fn, 1, 70, 40, 2);  // hs 20, padded to 32
}

TEST(CudaGptKernels, FlashAttentionMatchesTheCpuKernelsAtGpt2Shapes) {
  const auto fn = Plugin().Symbol<FlashAttentionFn>("dst_cuda_plugin_flash_attention");
  DST_GPU_SKIP_IF_ABSENT(fn);
  CheckFlashAttention(fn, 1, 1024, 768, 12);
}

// The fused kernels on the LLaMA and BLOOM head layouts against the CPU's
// attention: grouped-query (2 query heads a key/value head), multi-query,
// BLOOM's interleaved rows with ALiBi (over all heads, and over a tensor-
// parallel rank's slice of them: first_head 3 of 6), a LLaMA-sized head
// (64) with GQA. y and dqkv within 1e-5 of the CPU's scale; lse against a
// double-precision log-sum-exp of the biased scores.
void CheckFlashAttentionShape(FlashAttentionShapeFn fn, const cpu::AttentionShape &s) {
  const long B = long(s.B), T = long(s.T), C = long(s.C), H = long(s.H), hs = C / H;
  const long W = long(s.width());
  const std::vector<float> qkv = Random(size_t(B * T * W), 1.0f, 44);
  const std::vector<float> dy = Random(size_t(B * T * C), 1.0f, 45);
  std::vector<float> g_y(size_t(B * T * C)), g_lse(size_t(B * H * T)), g_dqkv(qkv.size());
  const DstCudaAttentionShape shape{B, T, C, H, long(s.kv_heads), s.interleaved ? 1 : 0,
                                    long(s.alibi_heads), long(s.first_head)};
  char err[512] = {};
  const int rc = fn(qkv.data(), dy.data(), &shape, g_y.data(), g_lse.data(), g_dqkv.data(), err,
                    sizeof err);
  DST_GPU_CHECK_RC(rc, err);
  std::vector<float> att(size_t(B * H * T * T)), y(size_t(B * T * C)), dqkv(qkv.size());
  std::vector<float> scratch(size_t(std::max(1, omp_get_max_threads()) * T * T));
  cpu::AttentionForward(qkv.data(), s, att.data(), y.data());
  cpu::AttentionBackward(dy.data(), qkv.data(), att.data(), s, dqkv.data(), scratch.data());
  const std::string what = "T=" + std::to_string(T) + " hs=" + std::to_string(hs) +
                           " kv=" + std::to_string(s.kv()) +
                           (s.interleaved ? " interleaved" : "") +
                           (s.alibi_heads > 0 ? " alibi" : "");
  EXPECT_EQ(FirstFar(g_y, y, 1e-5f), y.size()) << "y, " << what;
  EXPECT_EQ(FirstFar(g_dqkv, dqkv, 1e-5f), dqkv.size()) << "dqkv, " << what;
  std::vector<float> lse(g_lse.size());
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h) {
      const double slope = double(cpu::AlibiSlopeOf(s, h));
      for (long t = 0; t < T; ++t) {
        const float *q = &qkv[size_t((b * T + t) * W + s.q_offset(h))];
        double sum = 0, max = -1e300;
        std::vector<double> scores(size_t(t + 1));
        for (long j = 0; j <= t; ++j) {
          const float *k = &qkv[size_t((b * T + j) * W + s.k_offset(s.group(h)))];
          double dot = 0;
          for (long d = 0; d < hs; ++d) dot += double(q[d]) * double(k[d]);
          scores[size_t(j)] = dot / std::sqrt(double(hs)) + slope * double(j);
          max = std::max(max, scores[size_t(j)]);
        }
        for (double x : scores) sum += std::exp(x - max);
        lse[size_t((b * H + h) * T + t)] = float(max + std::log(sum));
      }
    }
  EXPECT_EQ(FirstFar(g_lse, lse, 1e-5f), lse.size()) << "lse, " << what;
}

TEST(CudaGptKernels, FlashAttentionMatchesTheCpuOnFamilyHeadLayouts) {
  const auto fn = Plugin().Symbol<FlashAttentionShapeFn>("dst_cuda_plugin_flash_attention_shape");
  DST_GPU_SKIP_IF_ABSENT(fn);
  for (long T : {1L, 5L, 33L, 65L}) {
    CheckFlashAttentionShape(fn, {2, T, 48, 4, /*kv_heads=*/2});
    CheckFlashAttentionShape(fn, {2, T, 48, 4, /*kv_heads=*/1});
    CheckFlashAttentionShape(fn, {2, T, 48, 3, 0, /*interleaved=*/true, /*alibi_heads=*/3});
  }
  CheckFlashAttentionShape(fn, {1, 40, 48, 3, 0, true, /*alibi_heads=*/6, /*first_head=*/3});
  CheckFlashAttentionShape(fn, {1, 130, 256, 4, /*kv_heads=*/2});  // hs 64
}

TEST(CudaGptKernels, FlashAttentionRefusesHeadsOver128) {
  const auto fn = Plugin().Symbol<FlashAttentionFn>("dst_cuda_plugin_flash_attention");
  DST_GPU_SKIP_IF_ABSENT(fn);
  const long B = 1, T = 4, C = 256, H = 1;  // hs 256
  const std::vector<float> qkv(size_t(B * T * 3 * C), 0.5f), dy(size_t(B * T * C), 1.0f);
  std::vector<float> y(size_t(B * T * C)), lse(static_cast<size_t>(T)), dqkv(qkv.size());
  char err[512] = {};
  const int rc =
      fn(qkv.data(), dy.data(), B, T, C, H, y.data(), lse.data(), dqkv.data(), err, sizeof err);
  if (rc == 1) GTEST_SKIP() << "skipped: no CUDA device";
  EXPECT_EQ(rc, 2);
  EXPECT_NE(std::string(err).find("head size"), std::string::npos) << err;
}

TEST(CudaGptKernels, GradientStatisticsMatchTheCpuSumAndFindNonFiniteValues) {
  const auto fn = Plugin().Symbol<GradStatsFn>("dst_cuda_plugin_grad_stats");
  DST_GPU_SKIP_IF_ABSENT(fn);
  std::vector<float> x = Random(1000003, 1e-2f, 50);
  double sum = 0;
  long bad = 0;
  char err[512] = {};
  int rc = fn(x.data(), long(x.size()), &sum, &bad, err, sizeof err);
  DST_GPU_CHECK_RC(rc, err);
  const double cpu = SumOfSquares(StorageType::kFp32, x.data(), int64_t(x.size()));
  EXPECT_NEAR(sum, cpu, 1e-12 * cpu);
  EXPECT_EQ(bad, 0);
  x[17] = std::numeric_limits<float>::infinity();
  x[999999] = std::numeric_limits<float>::quiet_NaN();
  rc = fn(x.data(), long(x.size()), &sum, &bad, err, sizeof err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(bad, 2);
  EXPECT_FALSE(std::isfinite(sum));
}

// Row-major GEMMs with every transpose, padded leading dimensions, alpha and
// beta: fp32 against cpu::Gemm; TF32 within 5e-3 of the largest element (10-bit mantissas, k =
// 129); bf16 and fp16 operands against the CPU product of the same rounded operands.
TEST(CudaGptKernels, CublasLtGemmsMatchTheCpuGemm) {
  const auto fn = Plugin().Symbol<GemmFn>("dst_cuda_plugin_gemm");
  DST_GPU_SKIP_IF_ABSENT(fn);
  const long m = 67, n = 45, k = 129, pad = 3;
  for (int type = 0; type < 4; ++type)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const long lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
        std::vector<float> a = Random(size_t((ta ? k : m) * lda), 1.0f, 60);
        std::vector<float> b = Random(size_t((tb ? n : k) * ldb), 1.0f, 61);
        const std::vector<float> c0 = Random(size_t(m * ldc), 1.0f, 62);
        std::vector<float> g_c = c0, c = c0;
        char err[512] = {};
        const int rc = fn(type, ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, 0.5f,
                          g_c.data(), ldc, err, sizeof err);
        DST_GPU_CHECK_RC(rc, err);
        if (type >= 2)  // the GPU multiplies the rounded operands
          for (std::vector<float> *x : {&a, &b})
            for (float &v : *x)
              v = type == 2 ? BFloat16ToFloat(FloatToBFloat16(v)) : HalfToFloat(FloatToHalf(v));
        cpu::Gemm(ta, tb, int(m), int(n), int(k), 0.75f, a.data(), int(lda), b.data(), int(ldb),
                  0.5f, c.data(), int(ldc));
        const float tol = type == 1 ? 5e-3f : 1e-5f;
        EXPECT_EQ(FirstFar(g_c, c, tol), c.size())
            << "type " << type << " ta " << ta << " tb " << tb;
      }
}

}  // namespace
}  // namespace dst
