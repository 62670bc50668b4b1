// The GPU test suite (ctest label "gpu", scripts/test-gpu.sh): every CUDA
// kernel against the CPU kernel on random inputs (fp32 within 1e-5, casts bit
// for bit). Without the CUDA plugin or a device each test is reported as
// skipped ("skipped: no CUDA device"), never as passed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/kernels/cpu/activations.h"
#include "core/kernels/cpu/cpu_adam.h"
#include "core/kernels/cpu/layernorm.h"
#include "core/precision/convert.h"
#include "tests/gpu/gpu_test_support.h"

namespace dst {
namespace {

// Runs a kernel; false (and the test is skipped) without a plugin or device.
bool RunOnGpu(const char *kernel, const std::vector<float> &a, const std::vector<float> *b,
              std::vector<float> *out, std::string *skip) {
  if (Plugin().elementwise == nullptr) {
    *skip = "skipped: no CUDA plugin (" + Plugin().why + ")";
    return false;
  }
  out->assign(a.size(), 0.0f);
  char err[512] = {};
  const int rc = Plugin().elementwise(kernel, a.data(), b ? b->data() : nullptr, out->data(),
                                      long(a.size()), err, sizeof err);
  if (rc == 1) {
    *skip = "skipped: no CUDA device";
    return false;
  }
  EXPECT_EQ(rc, 0) << err;
  return rc == 0;
}

#define RUN_OR_SKIP(kernel, a, b, out)         \
  do {                                         \
    std::string skip;                          \
    if (!RunOnGpu(kernel, a, b, out, &skip)) { \
      if (!skip.empty()) GTEST_SKIP() << skip; \
      return;                                  \
    }                                          \
  } while (0)

TEST(CudaKernels, GeluForwardMatchesTheCpuKernel) {
  const std::vector<float> x = Random(100003, 3.0f, 1);
  std::vector<float> gpu, cpu(x.size());
  RUN_OR_SKIP("gelu_forward", x, nullptr, &gpu);
  cpu::GeluForward(x.data(), int64_t(x.size()), cpu.data());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(gpu[i], cpu[i], 1e-5f * (1.0f + std::fabs(cpu[i]))) << "x = " << x[i];
}

TEST(CudaKernels, GeluBackwardMatchesTheCpuKernel) {
  const std::vector<float> x = Random(100003, 3.0f, 2), dy = Random(100003, 1.0f, 3);
  std::vector<float> gpu, cpu(x.size());
  RUN_OR_SKIP("gelu_backward", x, &dy, &gpu);
  cpu::GeluBackward(dy.data(), x.data(), int64_t(x.size()), cpu.data());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(gpu[i], cpu[i], 1e-5f * (1.0f + std::fabs(cpu[i]))) << "x = " << x[i];
}

// The casts bit for bit, special values included.
TEST(CudaKernels, SixteenBitRoundTripsEqualTheCpuCastsBitForBit) {
  std::vector<float> x = Random(65536, 1e3f, 4);
  for (float v : {0.0f, -0.0f, 1e-8f, -6e-8f, 65504.0f, 65520.0f, 1e30f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min()})
    x.push_back(v);
  for (const char *kernel : {"round_bf16", "round_fp16"}) {
    std::vector<float> gpu;
    RUN_OR_SKIP(kernel, x, nullptr, &gpu);
    const bool bf16 = std::strcmp(kernel, "round_bf16") == 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float cpu =
          bf16 ? BFloat16ToFloat(FloatToBFloat16(x[i])) : HalfToFloat(FloatToHalf(x[i]));
      uint32_t g, c;
      std::memcpy(&g, &gpu[i], 4);
      std::memcpy(&c, &cpu, 4);
      ASSERT_EQ(g, c) << kernel << " of " << x[i];
    }
  }
}

// AdamW and Adam steps against CPU-Adam's scalar path: the same formula
// (math::AdamElement), so within fp32 rounding of contracted multiply-adds.
// The first moment's tolerance scales with the terms summed as well as the
// result: m = beta1 m + (1 - beta1) g, with g = grad + l2 p for Adam, cancels
// where g opposes m (first seen on an H200: 1.6e-12 apart at m = 2.9e-7
// from terms near 1e-4, a few ulps of the terms).
TEST(CudaKernels, AdamStepMatchesCpuAdam) {
  if (Plugin().adam == nullptr) GTEST_SKIP() << "skipped: no CUDA plugin (" << Plugin().why << ")";
  const size_t n = 50001;
  for (bool decoupled : {true, false}) {
    const cpu::AdamHyper h{1e-3, 0.9, 0.95, 1e-8, 0.1, 7, decoupled};
    std::vector<float> param = Random(n, 0.02f, 5), grad = Random(n, 1e-3f, 6);
    std::vector<float> m = Random(n, 1e-4f, 7), v(n);
    for (size_t i = 0; i < n; ++i) v[i] = m[i] * m[i] * 3.0f;
    const std::vector<float> m0 = m, p0 = param;
    std::vector<float> gp = param, gm = m, gv = v;
    const math::AdamConstants k = cpu::AdamConstantsFor(h, 0.5f);
    char err[512] = {};
    const int rc =
        Plugin().adam(gp.data(), grad.data(), gm.data(), gv.data(), long(n), &k, err, sizeof err);
    if (rc == 1) GTEST_SKIP() << "skipped: no CUDA device";
    ASSERT_EQ(rc, 0) << err;
    cpu::CpuAdamRange r{param.data(), grad.data(), m.data(), v.data(), int64_t(n), 0.5f};
    cpu::CpuAdamUpdate(r, h, cpu::SimdPath::kScalar);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(gp[i], param[i], 1e-6f * (1.0f + std::fabs(param[i]))) << i;
      const float terms = std::fabs(m0[i]) + std::fabs(grad[i]) + 0.1f * std::fabs(p0[i]);
      ASSERT_NEAR(gm[i], m[i], 1e-6f * (std::fabs(m[i]) + terms)) << i;
      ASSERT_NEAR(gv[i], v[i], 1e-6f * std::fabs(v[i]) + 1e-15f) << i;
    }
  }
}

// LayerNorm forward (out, mean, rstd) and backward (dx, dw, db accumulated)
// against the CPU kernels, at widths below, at and above a warp, and at
// GPT-2's width over many rows (the parameter gradients' row chunks, the
// last one partial).
TEST(CudaKernels, LayerNormMatchesTheCpuKernels) {
  if (Plugin().layernorm == nullptr)
    GTEST_SKIP() << "skipped: no CUDA plugin (" << Plugin().why << ")";
  const std::pair<int64_t, int64_t> shapes[] = {
      {77, 24}, {77, 64}, {77, 384}, {77, 1000}, {4099, 768}};
  for (const auto &[rows, C] : shapes) {
    const size_t n = size_t(rows * C), nrows = size_t(rows), ncols = size_t(C);
    const std::vector<float> x = Random(n, 2.0f, 8), dy = Random(n, 1.0f, 9);
    const std::vector<float> w = Random(ncols, 1.0f, 10), b = Random(ncols, 1.0f, 11);
    std::vector<float> out(n), mean(nrows), rstd(nrows), dx = Random(n, 0.1f, 12);
    std::vector<float> dw = Random(ncols, 0.1f, 13), db = Random(ncols, 0.1f, 14);
    std::vector<float> g_out = out, g_mean = mean, g_rstd = rstd, g_dx = dx, g_dw = dw, g_db = db;
    char err[512] = {};
    const int rc =
        Plugin().layernorm(x.data(), w.data(), b.data(), dy.data(), long(rows), long(C),
                           float(cpu::kLayerNormEps), g_out.data(), g_mean.data(), g_rstd.data(),
                           g_dx.data(), g_dw.data(), g_db.data(), err, sizeof err);
    if (rc == 1) GTEST_SKIP() << "skipped: no CUDA device";
    ASSERT_EQ(rc, 0) << err;
    std::vector<float> scratch(2 * ncols);
    cpu::LayerNormForward(x.data(), w.data(), b.data(), rows, C, out.data(), mean.data(),
                          rstd.data());
    cpu::LayerNormBackward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), rows, C,
                           dx.data(), dw.data(), db.data(), scratch.data(), 1);
    auto near = [](const std::vector<float> &got, const std::vector<float> &want, float tol) {
      for (size_t i = 0; i < want.size(); ++i)
        if (std::fabs(got[i] - want[i]) > tol * (1.0f + std::fabs(want[i]))) return i;
      return want.size();
    };
    EXPECT_EQ(near(g_out, out, 1e-5f), n) << "out, C=" << C;
    EXPECT_EQ(near(g_mean, mean, 1e-5f), size_t(rows)) << "mean, C=" << C;
    EXPECT_EQ(near(g_rstd, rstd, 1e-5f), size_t(rows)) << "rstd, C=" << C;
    EXPECT_EQ(near(g_dx, dx, 1e-5f), n) << "dx, C=" << C;
    EXPECT_EQ(near(g_dw, dw, 1e-4f), size_t(C)) << "dw, C=" << C;  // sums over the rows
    EXPECT_EQ(near(g_db, db, 1e-4f), size_t(C)) << "db, C=" << C;
  }
}

}  // namespace
}  // namespace dst
