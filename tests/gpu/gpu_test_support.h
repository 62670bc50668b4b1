// What the GPU test files share: the CUDA plugin's test entry points
// (looked up once; null without a plugin), random inputs, and the skip that
// reports "skipped: no CUDA device" rather than a pass.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/kernels/elementwise_math.h"
#include "core/runtime/plugin.h"

namespace dst {

using ElementwiseFn = int (*)(const char *kernel, const float *a, const float *b, float *out,
                              long n, char *err, size_t cap);

using AdamFn = int (*)(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, long n,
                       const math::AdamConstants *k, char *err, size_t cap);

using LayerNormFn = int (*)(const float *x, const float *w, const float *b, const float *dy,
                            long rows, long C, float eps, float *out, float *mean, float *rstd,
                            float *dx, float *dw, float *db, char *err, size_t cap);

struct CudaPlugin {
  ElementwiseFn elementwise = nullptr;
  AdamFn adam = nullptr;
  LayerNormFn layernorm = nullptr;
  void *handle = nullptr;
  std::string why;
  // Entry point `name` as a function pointer of type Fn, or null.
  template <typename Fn>
  Fn Symbol(const char *name) const {
    return handle != nullptr ? reinterpret_cast<Fn>(dlsym(handle, name)) : nullptr;
  }
};

inline const CudaPlugin &Plugin() {
  static const CudaPlugin plugin = [] {
    CudaPlugin p;
#ifdef DSTRAIN_CUDA_PLUGIN_BUILD_PATH
    const OpenedPlugin opened =
        OpenPlugin({"libdstrain_cuda.so", "DSTRAIN_CUDA_PLUGIN", DSTRAIN_CUDA_PLUGIN_BUILD_PATH,
                    "dst_cuda_plugin_elementwise", "the CUDA runtime"});
    p.elementwise = reinterpret_cast<ElementwiseFn>(opened.entry);
    if (opened.handle != nullptr)
      p.adam = reinterpret_cast<AdamFn>(dlsym(opened.handle, "dst_cuda_plugin_adam"));
    if (opened.handle != nullptr)
      p.layernorm =
          reinterpret_cast<LayerNormFn>(dlsym(opened.handle, "dst_cuda_plugin_layernorm"));
    p.handle = opened.handle;
    p.why = opened.error;
#else
    p.why = "this build has no CUDA plugin";
#endif
    return p;
  }();
  return plugin;
}

inline std::vector<float> Random(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v) x = normal(rng);
  return v;
}

// Skips the test when an entry point returned 1 (no device) or is missing.
#define DST_GPU_SKIP_IF_ABSENT(fn)                                                   \
  do {                                                                               \
    if ((fn) == nullptr) GTEST_SKIP() << "skipped: no CUDA plugin (" << Plugin().why \
                                      << ")";                                        \
  } while (0)
#define DST_GPU_CHECK_RC(rc, err)                                \
  do {                                                           \
    if ((rc) == 1) GTEST_SKIP() << "skipped: no CUDA device";    \
    ASSERT_EQ((rc), 0) << (err);                                 \
  } while (0)

}  // namespace dst
