// A training step allocates nothing: this test binary counts every C++
// allocation (global operator new) around train_batch calls.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "core/engine/engine.h"

namespace {
std::atomic<long> g_allocations{0};
}

// These replace the global allocation functions for this test binary, so
// new/delete pair up through malloc/free by design; GCC's inliner cannot see
// that and warns.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void *operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void *p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void *p) noexcept {
  std::free(p);
}
void operator delete(void *p, size_t) noexcept {
  std::free(p);
}
// The nothrow forms too: the library's own would otherwise pair with the
// delete above (AddressSanitizer's nothrow new does not call this file's new).
void *operator new(size_t size, const std::nothrow_t &) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size ? size : 1);
}
void operator delete(void *p, const std::nothrow_t &) noexcept {
  std::free(p);
}

namespace dst {
namespace {

class EngineAllocations : public ::testing::TestWithParam<int> {};

TEST_P(EngineAllocations, TrainStepAllocatesNothingAfterTheFirst) {
  EngineOptions options;
  options.config_text =
      R"({"train_micro_batch_size_per_gpu":2,"gradient_accumulation_steps":2,
          "gradient_clipping":1.0,"scheduler":{"type":"WarmupLR","params":{"warmup_num_steps":5}},
          "zero_optimization":{"stage":)" +
      std::to_string(GetParam()) +
      R"(,"overlap_comm":true,"stage3_param_persistence_threshold":20},
          "dstrain":{"num_threads":1}})";
  options.model_text =
      R"({"type":"gpt","vocab_size":64,"n_ctx":8,"n_layer":2,"n_head":2,"d_model":16})";
  Result<std::unique_ptr<Engine>> engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  std::vector<int32_t> tokens(4 * 8), targets(4 * 8);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = int32_t(i * 7 % 64);
    targets[i] = int32_t(i * 5 % 64);
  }
  BatchView batch;
  batch.n_samples = 4;
  batch.seq_len = 8;
  batch.tokens = tokens.data();
  batch.tokens_count = tokens.size();
  batch.targets = targets.data();
  batch.targets_count = targets.size();
  float loss = 0;
  ASSERT_TRUE(engine.value()->TrainBatch(batch, &loss).ok());  // builds the cached program
  const long before = g_allocations.load();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine.value()->TrainBatch(batch, &loss).ok());
  EXPECT_EQ(g_allocations.load() - before, 0);
}

INSTANTIATE_TEST_SUITE_P(EveryZeroStage, EngineAllocations, ::testing::Values(0, 1, 2, 3));

}  // namespace
}  // namespace dst
