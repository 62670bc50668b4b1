// Misuse of the C ABI: every case returns an error status with a message and
// never crashes.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "capi_test_util.h"

namespace {

using dst_test::AdamWConfig;
using dst_test::CreateEngine;
using dst_test::kTinyGpt;
using dst_test::TokenBatch;

void ExpectError(dst_status_t got, dst_status_t want, const char *needle) {
  EXPECT_EQ(got, want) << dst_last_error();
  EXPECT_NE(std::string(dst_last_error()).find(needle), std::string::npos)
      << "message \"" << dst_last_error() << "\" lacks \"" << needle << "\"";
}

class Misuse : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = CreateEngine(AdamWConfig(2, 1), kTinyGpt);
    ASSERT_NE(engine_, nullptr);
  }
  void TearDown() override { dst_engine_destroy(engine_); }
  dst_engine_t *engine_ = nullptr;
};

TEST(MisuseNoEngine, DestroyNullIsANoOp) {
  dst_engine_destroy(nullptr);
}

TEST(MisuseNoEngine, CreateWithNullArguments) {
  ExpectError(dst_engine_create(nullptr, nullptr), DST_ERR_INVALID_ARGUMENT, "out");
  dst_engine_t *e = reinterpret_cast<dst_engine_t *>(0x1);
  ExpectError(dst_engine_create(&e, nullptr), DST_ERR_INVALID_ARGUMENT, "options");
  EXPECT_EQ(e, nullptr);
}

TEST(MisuseNoEngine, CreateWithUninitialisedOptions) {
  dst_engine_options_t opts{};
  dst_engine_t *e = nullptr;
  ExpectError(dst_engine_create(&e, &opts), DST_ERR_INVALID_ARGUMENT, "dst_engine_options_default");
}

TEST(MisuseNoEngine, CreateWithoutConfigOrWithBoth) {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.model_json = kTinyGpt;
  dst_engine_t *e = nullptr;
  ExpectError(dst_engine_create(&e, &opts), DST_ERR_INVALID_ARGUMENT, "no config given");
  opts.config_json = "{}";
  opts.config_path = "/tmp/x.json";
  ExpectError(dst_engine_create(&e, &opts), DST_ERR_INVALID_ARGUMENT, "exactly one");
}

TEST(MisuseNoEngine, CreateWithMissingConfigFile) {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.config_path = "/nonexistent/ds_config.json";
  opts.model_json = kTinyGpt;
  dst_engine_t *e = nullptr;
  ExpectError(dst_engine_create(&e, &opts), DST_ERR_IO, "/nonexistent/ds_config.json");
}

// Config files that are not regular files are refused by name, at once,
// through the engine and through dst_config_file_read (the CLI's reader).
TEST(MisuseNoEngine, ConfigPathsThatAreNotRegularFilesAreRefused) {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.config_path = "/dev/zero";
  opts.model_json = kTinyGpt;
  dst_engine_t *e = nullptr;
  ExpectError(dst_engine_create(&e, &opts), DST_ERR_IO, "is a character device");
  opts.config_path = "/";
  ExpectError(dst_engine_create(&e, &opts), DST_ERR_IO, "is a directory");
  const char *text = nullptr;
  ExpectError(dst_config_file_read("/dev/zero", &text), DST_ERR_IO, "/dev/zero");
  ExpectError(dst_config_file_read(nullptr, &text), DST_ERR_INVALID_ARGUMENT, "path");
}

TEST(MisuseNoEngine, ThreadCountsFarAboveTheCoresAreRefused) {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.config_json =
      "{\"train_micro_batch_size_per_gpu\": 2, \"dstrain\": {\"num_threads\": 100000}}";
  opts.model_json = kTinyGpt;
  dst_engine_t *e = nullptr;
  ExpectError(dst_engine_create(&e, &opts), DST_ERR_CONFIG, "num_threads 100000 is far above");
}

// Config-supplied sizes whose products overflow (or exceed any machine) are
// refused with the numbers before anything is allocated.
TEST(MisuseNoEngine, ActivationSizesThatOverflowAreRefusedWithTheNumbers) {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.config_json = "{\"train_micro_batch_size_per_gpu\": 4000000000000000000}";
  opts.model_json = kTinyGpt;
  dst_engine_t *e = nullptr;
  ExpectError(dst_engine_create(&e, &opts), DST_ERR_CONFIG, "more than 64 bits hold");
  opts.config_json = "{\"train_micro_batch_size_per_gpu\": 100000000}";
  ExpectError(dst_engine_create(&e, &opts), DST_ERR_CONFIG, "100000000 x 16");
}

TEST(MisuseNoEngine, CreateWithBadModelSpec) {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  const std::string config = AdamWConfig();
  opts.config_json = config.c_str();
  opts.model_json = R"({"type":"gpt","n_ctx":16,"n_layer":1,"n_head":3,"d_model":32})";
  dst_engine_t *e = nullptr;
  ExpectError(dst_engine_create(&e, &opts), DST_ERR_CONFIG, "not divisible by n_head");
  opts.model_json = R"({"type":"transformer"})";
  ExpectError(dst_engine_create(&e, &opts), DST_ERR_CONFIG, "$.type");
}

TEST_F(Misuse, NullEngineAndNullBatch) {
  TokenBatch b(2, 16, 1);
  ExpectError(dst_engine_train_batch(nullptr, &b.batch, nullptr), DST_ERR_INVALID_ARGUMENT,
              "engine");
  ExpectError(dst_engine_train_batch(engine_, nullptr, nullptr), DST_ERR_INVALID_ARGUMENT, "batch");
  int64_t steps;
  ExpectError(dst_engine_step_count(nullptr, &steps), DST_ERR_INVALID_ARGUMENT, "engine");
  ExpectError(dst_engine_step_count(engine_, nullptr), DST_ERR_INVALID_ARGUMENT, "out_steps");
}

// Four threads calling train_batch on one engine: the calls that overlap
// another are refused by name, and every call that ran counted exactly one
// step (before the guard, 4 x 300 calls ended at 1183-1198 steps).
TEST_F(Misuse, ConcurrentCallsOnOneEngineAreRefusedNotLost) {
  constexpr int kThreads = 4, kCalls = 60;
  std::atomic<int> ran{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      TokenBatch b(2, 16, uint32_t(t + 1));
      for (int i = 0; i < kCalls; ++i) {
        const dst_status_t st = dst_engine_train_batch(engine_, &b.batch, nullptr);
        if (st == DST_OK) {
          ++ran;
        } else if (st == DST_ERR_STATE &&
                   std::string(dst_last_error()).find("must not overlap") != std::string::npos) {
          ++refused;
        } else {
          ++other;
        }
      }
    });
  for (std::thread &t : threads) t.join();
  int64_t steps = -1;
  ASSERT_EQ(dst_engine_step_count(engine_, &steps), DST_OK);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ran.load() + refused.load(), kThreads * kCalls);
  EXPECT_EQ(steps, ran.load());
  EXPECT_GT(ran.load(), 0);
}

// A destroyed handle is caught on entry without its memory being read (the
// library's set of live engines; AddressSanitizer checks that nothing reads
// it), and destroying it again does nothing; so is a pointer that never was
// an engine.
TEST(MisuseNoEngine, UseAfterDestroyAndDoubleDestroyAreCaught) {
  dst_engine_t *engine = CreateEngine(AdamWConfig(2, 1), kTinyGpt);
  ASSERT_NE(engine, nullptr);
  dst_engine_destroy(engine);
  int64_t steps = 0;
  ExpectError(dst_engine_step_count(engine, &steps), DST_ERR_INVALID_ARGUMENT, "not a live engine");
  dst_engine_destroy(engine);
  dst_engine_abort(engine);
  int not_an_engine = 0;
  ExpectError(dst_engine_step_count(reinterpret_cast<dst_engine_t *>(&not_an_engine), &steps),
              DST_ERR_INVALID_ARGUMENT, "not a live engine");
  dst_engine_destroy(reinterpret_cast<dst_engine_t *>(&not_an_engine));
}

TEST_F(Misuse, UninitialisedBatchStruct) {
  dst_batch_t b{};
  ExpectError(dst_engine_train_batch(engine_, &b, nullptr), DST_ERR_INVALID_ARGUMENT,
              "dst_batch_default");
}

TEST_F(Misuse, WrongSampleCountForTrain) {
  TokenBatch b(3, 16, 1);
  ExpectError(dst_engine_train_batch(engine_, &b.batch, nullptr), DST_ERR_INVALID_ARGUMENT,
              "n_samples is 3");
}

TEST_F(Misuse, TokenCountDoesNotMatchShape) {
  TokenBatch b(2, 16, 1);
  b.batch.tokens_count = 31;
  ExpectError(dst_engine_train_batch(engine_, &b.batch, nullptr), DST_ERR_INVALID_ARGUMENT,
              "tokens_count is 31");
}

TEST_F(Misuse, NullTokenBuffer) {
  TokenBatch b(2, 16, 1);
  b.batch.targets = nullptr;
  ExpectError(dst_engine_train_batch(engine_, &b.batch, nullptr), DST_ERR_INVALID_ARGUMENT,
              "batch.targets is NULL");
}

TEST_F(Misuse, SequenceLongerThanContext) {
  TokenBatch b(2, 17, 1);
  ExpectError(dst_engine_train_batch(engine_, &b.batch, nullptr), DST_ERR_INVALID_ARGUMENT,
              "n_ctx = 16");
}

TEST_F(Misuse, TokenOutOfVocabulary) {
  TokenBatch b(2, 16, 1);
  b.tokens[5] = 256;
  ExpectError(dst_engine_train_batch(engine_, &b.batch, nullptr), DST_ERR_INVALID_ARGUMENT,
              "tokens[5] = 256");
  b.tokens[5] = 1;
  b.targets[7] = -2;
  ExpectError(dst_engine_train_batch(engine_, &b.batch, nullptr), DST_ERR_INVALID_ARGUMENT,
              "targets[7] = -2");
}

// Sizes whose product wraps around 64 bits are refused with the numbers,
// not compared (a wrapped count could match) or allocated.
TEST_F(Misuse, SampleCountsWhoseSizesOverflowAreRefused) {
  TokenBatch b(2, 16, 1);
  b.batch.n_samples = size_t(1) << 62;  // a multiple of the micro-batch, x 16 wraps
  b.batch.tokens_count = 0;
  ExpectError(dst_engine_eval_batch(engine_, &b.batch, nullptr), DST_ERR_INVALID_ARGUMENT,
              "does not fit in 64 bits");
  b.batch.n_samples = ~size_t(0) - 1;
  ExpectError(dst_engine_eval_batch(engine_, &b.batch, nullptr), DST_ERR_INVALID_ARGUMENT,
              "more than any buffer can hold");
}

TEST_F(Misuse, EvalNeedsAMultipleOfTheMicroBatch) {
  TokenBatch b(3, 16, 1);
  ExpectError(dst_engine_eval_batch(engine_, &b.batch, nullptr), DST_ERR_INVALID_ARGUMENT,
              "multiple of train_micro_batch_size_per_gpu 2");
}

TEST_F(Misuse, ParamAccessWithWrongNameOrSize) {
  std::vector<float> buf(32);
  ExpectError(dst_engine_get_param(engine_, "no.such.weight", buf.data(), 32),
              DST_ERR_INVALID_ARGUMENT, "no parameter named");
  ExpectError(dst_engine_get_param(engine_, "transformer.ln_f.weight", buf.data(), 31),
              DST_ERR_INVALID_ARGUMENT, "has 32 elements");
  ExpectError(dst_engine_set_param(engine_, "transformer.ln_f.weight", nullptr, 32),
              DST_ERR_INVALID_ARGUMENT, "data");
  dst_tensor_info_t info;
  info.struct_size = sizeof info;
  ExpectError(dst_engine_param_info(engine_, 9999, &info), DST_ERR_INVALID_ARGUMENT,
              "out of range");
}

TEST_F(Misuse, CheckpointErrors) {
  ExpectError(dst_engine_save_checkpoint(engine_, "/tmp", "../escape", nullptr),
              DST_ERR_INVALID_ARGUMENT, "contains '/'");
  ExpectError(dst_engine_save_checkpoint(engine_, "/tmp/dstrain_x", "t", "{not json"),
              DST_ERR_INVALID_ARGUMENT, "client_state is not valid JSON");
  ExpectError(dst_engine_load_checkpoint(engine_, "/nonexistent/ckpts", nullptr, nullptr),
              DST_ERR_IO, "does not exist");
  ExpectError(dst_engine_save_checkpoint(engine_, "/proc/dstrain_cannot_write", "t", nullptr),
              DST_ERR_IO, "/proc/dstrain_cannot_write");
}

TEST_F(Misuse, NonFiniteWeightsSkipTheStepWithANumericError) {
  std::vector<float> w(32, std::numeric_limits<float>::quiet_NaN());
  ASSERT_EQ(dst_engine_set_param(engine_, "transformer.ln_f.weight", w.data(), 32), DST_OK);
  TokenBatch b(2, 16, 1);
  ExpectError(dst_engine_train_batch(engine_, &b.batch, nullptr), DST_ERR_NUMERIC, "not finite");
  int64_t steps = -1;
  dst_engine_step_count(engine_, &steps);
  EXPECT_EQ(steps, 0);
}

}  // namespace
