// The ABI's promises: versioned structs work in both directions (a caller
// built against an older header, one built against a newer one), and
// dst_engine_abort frees an engine without waiting for anyone.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "abi_v1/old_client.h"
#include "capi_test_util.h"

namespace {

using dst_test::AdamWConfig;
using dst_test::CreateEngine;
using dst_test::kTinyGpt;
using dst_test::TokenBatch;

void ExpectError(dst_status_t got, dst_status_t want, const std::vector<std::string> &needles) {
  EXPECT_EQ(got, want) << dst_last_error();
  const std::string message = dst_last_error();
  for (const std::string &needle : needles)
    EXPECT_NE(message.find(needle), std::string::npos)
        << "message \"" << message << "\" lacks \"" << needle << "\"";
}

// ------------------------------------------------------------ ABI version 1

TEST(AbiV1, TheFirstVersionSizesAreTheFrozenHeaders) {
  size_t v1[4];
  dst_abi_v1_sizes(v1);
  EXPECT_EQ(v1[0], DST_ENGINE_OPTIONS_V1_SIZE);
  EXPECT_EQ(v1[1], DST_BATCH_V1_SIZE);
  EXPECT_EQ(v1[2], DST_ENGINE_INFO_V1_SIZE);
  EXPECT_EQ(v1[3], DST_TENSOR_INFO_V1_SIZE);
  // Structs only grow.
  EXPECT_GE(sizeof(dst_engine_options_t), DST_ENGINE_OPTIONS_V1_SIZE);
  EXPECT_GE(sizeof(dst_batch_t), DST_BATCH_V1_SIZE);
  EXPECT_GE(sizeof(dst_engine_info_t), DST_ENGINE_INFO_V1_SIZE);
  EXPECT_GE(sizeof(dst_tensor_info_t), DST_TENSOR_INFO_V1_SIZE);
}

TEST(AbiV1, AClientBuiltAgainstTheFirstHeaderWorks) {
  const std::string config = AdamWConfig(2, 1);
  dst_abi_v1_result old{};
  char message[1024];
  ASSERT_EQ(dst_abi_v1_client_run(config.c_str(), kTinyGpt, &old, message, sizeof message), 0)
      << message;
  EXPECT_EQ(old.info_struct_size, DST_ENGINE_INFO_V1_SIZE);
  EXPECT_EQ(old.tensor_struct_size, DST_TENSOR_INFO_V1_SIZE);

  // The same through today's header.
  dst_engine_t *e = CreateEngine(config, kTinyGpt);
  ASSERT_NE(e, nullptr);
  dst_engine_info_t info;
  info.struct_size = sizeof info;
  ASSERT_EQ(dst_engine_get_info(e, &info), DST_OK);
  EXPECT_EQ(old.num_parameters, info.num_parameters);
  EXPECT_EQ(old.output_dim, info.output_dim);
  dst_tensor_info_t tensor;
  tensor.struct_size = sizeof tensor;
  ASSERT_EQ(dst_engine_param_info(e, 0, &tensor), DST_OK);
  EXPECT_STREQ(old.first_param_name, tensor.name);
  EXPECT_EQ(old.first_param_numel, tensor.numel);
  std::vector<int32_t> tokens(32), targets(32);
  for (int i = 0; i < 32; ++i) {
    tokens[i] = (i * 3) % 256;
    targets[i] = (i * 3 + 3) % 256;
  }
  dst_batch_t batch = DST_BATCH_INIT;
  batch.n_samples = 2;
  batch.seq_len = 16;
  batch.tokens = tokens.data();
  batch.tokens_count = tokens.size();
  batch.targets = targets.data();
  batch.targets_count = targets.size();
  float loss = 0;
  ASSERT_EQ(dst_engine_train_batch(e, &batch, &loss), DST_OK) << dst_last_error();
  EXPECT_EQ(old.loss, loss);
  dst_engine_destroy(e);
}

// ------------------------------------------- a caller built against a newer header

// What a later header could declare: today's fields, then new ones.
struct OptionsV2 {
  dst_engine_options_t v1;
  const char *unknown_path;
  int64_t unknown_count;
};
struct BatchV2 {
  dst_batch_t v1;
  const float *unknown_weights;
  size_t unknown_weights_count;
};
struct InfoV2 {
  dst_engine_info_t v1;
  int64_t pp_size, tp_size;
};
struct TensorInfoV2 {
  dst_tensor_info_t v1;
  int32_t dtype;
  int64_t shard_begin, shard_end;
};
constexpr int64_t kUntouched = 0x5a5a5a5a5a5a5a5a;

TEST(AbiNewerCaller, LargerInStructsAreAcceptedAndTheirExtraFieldsIgnored) {
  const std::string config = AdamWConfig(2, 1);
  OptionsV2 options;
  std::memset(&options, 0, sizeof options);
  options.v1.struct_size = sizeof options;
  options.v1.config_json = config.c_str();
  options.v1.model_json = kTinyGpt;
  options.unknown_path = reinterpret_cast<const char *>(0x1);  // would crash if read
  options.unknown_count = -1;
  dst_engine_t *newer = nullptr;
  ASSERT_EQ(dst_engine_create(&newer, &options.v1), DST_OK) << dst_last_error();
  dst_engine_t *today = CreateEngine(config, kTinyGpt);
  ASSERT_NE(today, nullptr);

  TokenBatch b(2, 16, 3);
  BatchV2 batch;
  std::memset(&batch, 0, sizeof batch);
  batch.v1 = b.batch;
  batch.v1.struct_size = sizeof batch;
  batch.unknown_weights = reinterpret_cast<const float *>(0x1);
  batch.unknown_weights_count = 12345;
  float newer_loss = 0, today_loss = 0;
  ASSERT_EQ(dst_engine_train_batch(newer, &batch.v1, &newer_loss), DST_OK) << dst_last_error();
  ASSERT_EQ(dst_engine_train_batch(today, &b.batch, &today_loss), DST_OK) << dst_last_error();
  EXPECT_EQ(newer_loss, today_loss);
  ASSERT_EQ(dst_engine_eval_batch(newer, &batch.v1, &newer_loss), DST_OK) << dst_last_error();
  ASSERT_EQ(dst_engine_forward_backward(newer, &batch.v1, &newer_loss), DST_OK) << dst_last_error();

  const char *json = nullptr;
  ASSERT_EQ(dst_estimate_memory_json(&options.v1, 2, &json), DST_OK) << dst_last_error();
  EXPECT_NE(std::string(json).find("\"stages\""), std::string::npos);
  dst_engine_destroy(newer);
  dst_engine_destroy(today);
}

TEST(AbiNewerCaller, LargerOutStructsAreFilledAsFarAsTheLibraryKnows) {
  dst_engine_t *e = CreateEngine(AdamWConfig(2, 3), kTinyGpt);
  ASSERT_NE(e, nullptr);
  dst_engine_info_t today;
  today.struct_size = sizeof today;
  ASSERT_EQ(dst_engine_get_info(e, &today), DST_OK);

  InfoV2 info;
  std::memset(&info, 0, sizeof info);
  info.v1.struct_size = sizeof info;
  info.pp_size = info.tp_size = kUntouched;
  ASSERT_EQ(dst_engine_get_info(e, &info.v1), DST_OK) << dst_last_error();
  EXPECT_EQ(info.v1.struct_size, sizeof(dst_engine_info_t));  // what was written
  EXPECT_EQ(std::memcmp(&info.v1, &today, sizeof today), 0);
  EXPECT_EQ(info.pp_size, kUntouched);
  EXPECT_EQ(info.tp_size, kUntouched);

  dst_tensor_info_t tensor_today;
  tensor_today.struct_size = sizeof tensor_today;
  ASSERT_EQ(dst_engine_param_info(e, 1, &tensor_today), DST_OK);
  TensorInfoV2 tensor;
  std::memset(&tensor, 0, sizeof tensor);
  tensor.v1.struct_size = sizeof tensor;
  tensor.dtype = 0x5a5a5a5a;
  tensor.shard_begin = tensor.shard_end = kUntouched;
  ASSERT_EQ(dst_engine_param_info(e, 1, &tensor.v1), DST_OK) << dst_last_error();
  EXPECT_EQ(tensor.v1.struct_size, sizeof(dst_tensor_info_t));
  EXPECT_STREQ(tensor.v1.name, tensor_today.name);
  EXPECT_EQ(tensor.v1.ndim, tensor_today.ndim);
  EXPECT_EQ(tensor.v1.numel, tensor_today.numel);
  EXPECT_EQ(tensor.dtype, 0x5a5a5a5a);
  EXPECT_EQ(tensor.shard_begin, kUntouched);
  EXPECT_EQ(tensor.shard_end, kUntouched);
  dst_engine_destroy(e);
}

// ------------------------------------------------------ sizes out of range

TEST(AbiStructSize, SizesOutsideTheRangeAreRefusedByName) {
  const std::string config = AdamWConfig(2, 1);
  dst_engine_options_t options = DST_ENGINE_OPTIONS_INIT;
  EXPECT_EQ(options.struct_size, sizeof options);
  options.config_json = config.c_str();
  options.model_json = kTinyGpt;
  dst_engine_t *e = nullptr;
  const std::string v1 = std::to_string(DST_ENGINE_OPTIONS_V1_SIZE);
  const std::string max = std::to_string(DST_STRUCT_SIZE_MAX);
  options.struct_size = DST_ENGINE_OPTIONS_V1_SIZE - 1;
  ExpectError(dst_engine_create(&e, &options), DST_ERR_INVALID_ARGUMENT,
              {"dst_engine_create",
               "options->struct_size is " + std::to_string(DST_ENGINE_OPTIONS_V1_SIZE - 1),
               "dst_engine_options_t takes " + v1 + " (its first version) to " + max,
               "dst_engine_options_default"});
  EXPECT_EQ(e, nullptr);
  options.struct_size = DST_STRUCT_SIZE_MAX + 1;
  ExpectError(dst_engine_create(&e, &options), DST_ERR_INVALID_ARGUMENT,
              {"struct_size is " + std::to_string(DST_STRUCT_SIZE_MAX + 1), max + " bytes"});
  const char *json = nullptr;
  ExpectError(dst_estimate_memory_json(&options, 1, &json), DST_ERR_INVALID_ARGUMENT,
              {"dst_estimate_memory_json", "dst_engine_options_t"});
  options.struct_size = 0;
  ExpectError(dst_estimate_memory_json(&options, 1, &json), DST_ERR_INVALID_ARGUMENT,
              {"struct_size is 0"});

  e = CreateEngine(config, kTinyGpt);
  ASSERT_NE(e, nullptr);
  TokenBatch b(2, 16, 1);
  b.batch.struct_size = 8;
  ExpectError(dst_engine_forward_backward(e, &b.batch, nullptr), DST_ERR_INVALID_ARGUMENT,
              {"dst_engine_forward_backward", "batch->struct_size is 8",
               "dst_batch_t takes " + std::to_string(DST_BATCH_V1_SIZE), "dst_batch_default"});
  dst_engine_info_t info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = DST_ENGINE_INFO_V1_SIZE - 8;
  ExpectError(dst_engine_get_info(e, &info), DST_ERR_INVALID_ARGUMENT,
              {"dst_engine_get_info",
               "dst_engine_info_t takes " + std::to_string(DST_ENGINE_INFO_V1_SIZE)});
  EXPECT_EQ(info.num_parameters, 0);  // nothing written
  dst_tensor_info_t tensor;
  tensor.struct_size = 1 << 20;
  ExpectError(dst_engine_param_info(e, 0, &tensor), DST_ERR_INVALID_ARGUMENT,
              {"dst_engine_param_info", "dst_tensor_info_t"});
  dst_engine_destroy(e);
}

// ------------------------------------------------------------------ abort

TEST(Abort, NullIsANoOp) {
  dst_engine_abort(nullptr);
}

// True when something accepts TCP connections on 127.0.0.1:port.
bool Listening(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

TEST(Abort, FreesATrainingEngineAndStopsItsServer) {
  const std::string config =
      R"({"train_micro_batch_size_per_gpu":2,"optimizer":{"type":"AdamW","params":{"lr":0.003}},)"
      R"("dstrain":{"num_threads":1,"monitor":{"http":{"enabled":true,"port":0}}}})";
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.config_json = config.c_str();
  opts.model_json = kTinyGpt;
  dst_engine_t *e = nullptr;
  if (dst_engine_create(&e, &opts) != DST_OK &&
      std::string(dst_last_error()).find("sanitizer build") != std::string::npos)
    GTEST_SKIP() << dst_last_error();  // docs/reliability.md: no HTTP server under a sanitizer
  ASSERT_NE(e, nullptr) << dst_last_error();
  const char *url = nullptr;
  ASSERT_EQ(dst_engine_monitor_url(e, &url), DST_OK);
  const std::string u = url;  // http://127.0.0.1:PORT/
  const int port = std::stoi(u.substr(u.rfind(':') + 1));
  EXPECT_TRUE(Listening(port)) << u;
  TokenBatch b(2, 16, 1);
  float loss = 0;
  ASSERT_EQ(dst_engine_train_batch(e, &b.batch, &loss), DST_OK) << dst_last_error();
  dst_engine_abort(e);
  EXPECT_FALSE(Listening(port)) << "the metrics server outlived dst_engine_abort";
}

TEST(Abort, AfterAFailedStepAndBeforeAnyStep) {
  const std::string config = AdamWConfig(2, 1);
  dst_engine_t *e = CreateEngine(config, kTinyGpt);
  ASSERT_NE(e, nullptr);
  std::vector<float> w(32, std::numeric_limits<float>::quiet_NaN());
  ASSERT_EQ(dst_engine_set_param(e, "transformer.ln_f.weight", w.data(), 32), DST_OK);
  TokenBatch b(2, 16, 1);
  EXPECT_EQ(dst_engine_train_batch(e, &b.batch, nullptr), DST_ERR_NUMERIC);
  dst_engine_abort(e);
  e = CreateEngine(config, kTinyGpt);
  ASSERT_NE(e, nullptr);
  dst_engine_abort(e);
}

// The watchdog pattern: another thread aborts while this one trains. The
// running call (or the next one, when the abort lands between two) returns
// DST_ERR_ABORTED; dst_engine_abort returns only after it has; the handle
// then answers every call with DST_ERR_ABORTED and destroying it does nothing.
TEST(Abort, FromAnotherThreadStopsTheRunningCall) {
  dst_engine_t *e = CreateEngine(AdamWConfig(2, 8), kTinyGpt);  // 8 micro-batches a step
  ASSERT_NE(e, nullptr);
  TokenBatch b(16, 16, 1);
  std::atomic<bool> started{false}, abort_returned{false};
  std::chrono::steady_clock::time_point aborted_at;
  std::thread watchdog([&] {
    while (!started.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    aborted_at = std::chrono::steady_clock::now();
    dst_engine_abort(e);
    abort_returned = true;
  });
  dst_status_t st = DST_OK;
  int steps = 0;
  for (; steps < 100000 && st == DST_OK; ++steps) {
    started = true;
    st = dst_engine_train_batch(e, &b.batch, nullptr);
  }
  const auto returned_at = std::chrono::steady_clock::now();
  watchdog.join();
  EXPECT_EQ(st, DST_ERR_ABORTED) << dst_last_error();
  EXPECT_NE(std::string(dst_last_error()).find("dst_engine_abort"), std::string::npos)
      << dst_last_error();
  EXPECT_TRUE(abort_returned.load());
  EXPECT_LT(std::chrono::duration<double>(returned_at - aborted_at).count(), 1.0);
  int64_t count = 0;
  EXPECT_EQ(dst_engine_step_count(e, &count), DST_ERR_ABORTED);
  dst_engine_destroy(e);  // a dead handle: nothing happens
  dst_engine_abort(e);
  EXPECT_EQ(dst_engine_train_batch(e, &b.batch, nullptr), DST_ERR_ABORTED);
}

// An aborted handle's address never comes back from dst_engine_create, so a
// thread or an SDK object still holding it cannot reach a new engine.
TEST(Abort, AnAbortedHandleIsNeverHandedOutAgain) {
  std::set<dst_engine_t *> aborted;
  for (int i = 0; i < 8; ++i) {
    dst_engine_t *e = CreateEngine(AdamWConfig(2, 1), kTinyGpt);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(aborted.count(e), 0u) << "create returned an aborted handle's address";
    dst_engine_abort(e);
    aborted.insert(e);
  }
}

}  // namespace
