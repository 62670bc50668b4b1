// The engine through the C ABI, as a C program would use it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capi_test_util.h"

namespace {

using dst_test::AdamWConfig;
using dst_test::CreateEngine;
using dst_test::kTinyGpt;
using dst_test::TokenBatch;

std::string TempDir(const std::string &name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dstrain_capi_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

TEST(EngineCapi, VersionMatchesTheHeader) {
  EXPECT_STREQ(dst_version(), DST_VERSION_STRING);
  EXPECT_EQ(dst_version_number(), DST_VERSION_NUMBER);
  EXPECT_STREQ(dst_status_string(DST_OK), "ok");
  EXPECT_STREQ(dst_status_string(DST_ERR_NOT_SUPPORTED), "not supported yet");
  EXPECT_STREQ(dst_status_string(static_cast<dst_status_t>(999)), "unknown status");
}

TEST(EngineCapi, InfoDescribesTheModelAndBatch) {
  dst_engine_t *e = CreateEngine(AdamWConfig(2, 3), kTinyGpt);
  ASSERT_NE(e, nullptr);
  dst_engine_info_t info;
  info.struct_size = sizeof info;
  ASSERT_EQ(dst_engine_get_info(e, &info), DST_OK);
  EXPECT_EQ(info.model_type, DST_MODEL_GPT);
  EXPECT_EQ(info.micro_batch_size, 2);
  EXPECT_EQ(info.grad_accum_steps, 3);
  EXPECT_EQ(info.train_batch_size, 6);
  EXPECT_EQ(info.seq_len, 16);
  EXPECT_EQ(info.vocab_size, 256);
  EXPECT_EQ(info.num_parameters, 256 * 32 + 16 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 64);
  dst_engine_destroy(e);
}

TEST(EngineCapi, TrainingLowersTheLoss) {
  dst_engine_t *e = CreateEngine(AdamWConfig(4, 1), kTinyGpt);
  ASSERT_NE(e, nullptr);
  float first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    TokenBatch b(4, 16, uint32_t(step));
    float loss = 0;
    ASSERT_EQ(dst_engine_train_batch(e, &b.batch, &loss), DST_OK) << dst_last_error();
    if (step == 0) first = loss;
    last = loss;
  }
  EXPECT_NEAR(first, std::log(256.0f), 0.3f);
  EXPECT_LT(last, first - 1.0f);
  int64_t steps = 0;
  ASSERT_EQ(dst_engine_step_count(e, &steps), DST_OK);
  EXPECT_EQ(steps, 40);
  dst_engine_destroy(e);
}

TEST(EngineCapi, EvalDoesNotChangeTheWeights) {
  dst_engine_t *e = CreateEngine(AdamWConfig(2, 1), kTinyGpt);
  ASSERT_NE(e, nullptr);
  TokenBatch b(4, 16, 1);  // two micro-batches
  float l1 = 0, l2 = 0;
  ASSERT_EQ(dst_engine_eval_batch(e, &b.batch, &l1), DST_OK) << dst_last_error();
  ASSERT_EQ(dst_engine_eval_batch(e, &b.batch, &l2), DST_OK);
  EXPECT_EQ(l1, l2);
  int64_t steps = -1;
  dst_engine_step_count(e, &steps);
  EXPECT_EQ(steps, 0);
  dst_engine_destroy(e);
}

TEST(EngineCapi, GradientAccumulationEqualsTheLargeBatch) {
  // micro 4 x accum 1 and micro 2 x accum 2 see the same 4 samples: the
  // averaged gradients and therefore the updated weights agree.
  dst_engine_t *big = CreateEngine(AdamWConfig(4, 1), kTinyGpt);
  dst_engine_t *acc = CreateEngine(AdamWConfig(2, 2), kTinyGpt);
  ASSERT_TRUE(big && acc);
  for (int step = 0; step < 3; ++step) {
    TokenBatch b(4, 16, uint32_t(step + 10));
    float lb = 0, la = 0;
    ASSERT_EQ(dst_engine_train_batch(big, &b.batch, &lb), DST_OK) << dst_last_error();
    ASSERT_EQ(dst_engine_train_batch(acc, &b.batch, &la), DST_OK) << dst_last_error();
    EXPECT_NEAR(la, lb, 1e-5f * std::fabs(lb));
  }
  const char *name = "transformer.h.1.mlp.c_fc.weight";
  std::vector<float> wb(128 * 32), wa(128 * 32);
  ASSERT_EQ(dst_engine_get_param(big, name, wb.data(), wb.size()), DST_OK) << dst_last_error();
  ASSERT_EQ(dst_engine_get_param(acc, name, wa.data(), wa.size()), DST_OK);
  for (size_t i = 0; i < wb.size(); ++i) ASSERT_NEAR(wa[i], wb[i], 1e-5f) << i;
  dst_engine_destroy(big);
  dst_engine_destroy(acc);
}

TEST(EngineCapi, SaveLoadContinueIsBitIdentical) {
  const std::string dir = TempDir("ckpt");
  const std::string config = AdamWConfig(2, 2, R"(,"scheduler":{"type":"WarmupDecayLR",
      "params":{"warmup_max_lr":0.003,"warmup_num_steps":3,"total_num_steps":12}})");
  std::vector<float> uninterrupted;
  {
    dst_engine_t *e = CreateEngine(config, kTinyGpt);
    ASSERT_NE(e, nullptr);
    for (int step = 0; step < 10; ++step) {
      TokenBatch b(4, 16, uint32_t(step));
      float loss = 0;
      ASSERT_EQ(dst_engine_train_batch(e, &b.batch, &loss), DST_OK) << dst_last_error();
      uninterrupted.push_back(loss);
      if (step == 4) {
        ASSERT_EQ(dst_engine_save_checkpoint(e, dir.c_str(), nullptr, R"({"next_batch":5})"),
                  DST_OK)
            << dst_last_error();
      }
    }
    dst_engine_destroy(e);
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/global_step5/model.safetensors"));
  std::ifstream latest(dir + "/latest");
  std::string tag;
  latest >> tag;
  EXPECT_EQ(tag, "global_step5");

  dst_engine_t *e = CreateEngine(config, kTinyGpt);
  ASSERT_NE(e, nullptr);
  const char *client = nullptr;
  ASSERT_EQ(dst_engine_load_checkpoint(e, dir.c_str(), nullptr, &client), DST_OK)
      << dst_last_error();
  EXPECT_STREQ(client, R"({"next_batch":5})");
  int64_t steps = 0;
  dst_engine_step_count(e, &steps);
  EXPECT_EQ(steps, 5);
  for (int step = 5; step < 10; ++step) {
    TokenBatch b(4, 16, uint32_t(step));
    float loss = 0;
    ASSERT_EQ(dst_engine_train_batch(e, &b.batch, &loss), DST_OK) << dst_last_error();
    uint32_t got, want;
    std::memcpy(&got, &loss, 4);
    std::memcpy(&want, &uninterrupted[size_t(step)], 4);
    EXPECT_EQ(got, want) << "step " << step << ": " << loss << " vs "
                         << uninterrupted[size_t(step)];
  }
  dst_engine_destroy(e);
  std::filesystem::remove_all(dir);
}

TEST(EngineCapi, LoadingIntoADifferentModelNamesTheFirstMismatch) {
  const std::string dir = TempDir("mismatch");
  dst_engine_t *e = CreateEngine(AdamWConfig(), kTinyGpt);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(dst_engine_save_checkpoint(e, dir.c_str(), "t1", nullptr), DST_OK) << dst_last_error();
  dst_engine_destroy(e);
  dst_engine_t *wider = CreateEngine(
      AdamWConfig(),
      R"({"type":"gpt","vocab_size":256,"n_ctx":16,"n_layer":2,"n_head":2,"d_model":48})");
  ASSERT_NE(wider, nullptr);
  EXPECT_EQ(dst_engine_load_checkpoint(wider, dir.c_str(), "t1", nullptr), DST_ERR_CHECKPOINT);
  EXPECT_NE(std::string(dst_last_error()).find("transformer.wte.weight"), std::string::npos)
      << dst_last_error();
  dst_engine_destroy(wider);
  std::filesystem::remove_all(dir);
}

TEST(EngineCapi, CorruptCheckpointIsDetectedAndNamed) {
  const std::string dir = TempDir("corrupt");
  dst_engine_t *e = CreateEngine(AdamWConfig(), kTinyGpt);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(dst_engine_save_checkpoint(e, dir.c_str(), "t1", nullptr), DST_OK) << dst_last_error();
  const std::string file = dir + "/t1/zero_rank_0.safetensors";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4000);
    char c = 0;
    f.read(&c, 1);
    f.seekp(4000);
    c = char(c ^ 0x5a);
    f.write(&c, 1);
  }
  std::vector<float> before(32);
  ASSERT_EQ(dst_engine_get_param(e, "transformer.ln_f.weight", before.data(), 32), DST_OK);
  EXPECT_EQ(dst_engine_load_checkpoint(e, dir.c_str(), nullptr, nullptr), DST_ERR_CHECKPOINT);
  EXPECT_NE(std::string(dst_last_error()).find("zero_rank_0.safetensors"), std::string::npos)
      << dst_last_error();
  // Nothing was changed by the failed load.
  std::vector<float> after(32);
  ASSERT_EQ(dst_engine_get_param(e, "transformer.ln_f.weight", after.data(), 32), DST_OK);
  EXPECT_EQ(before, after);
  dst_engine_destroy(e);
  std::filesystem::remove_all(dir);
}

TEST(EngineCapi, SequentialMseModelTrains) {
  const char *model = R"({"type":"sequential","input_dim":4,"loss":"mse","seed":3,"layers":[
      {"type":"linear","out_features":16},{"type":"relu"},{"type":"linear","out_features":1}]})";
  dst_engine_t *e = CreateEngine(
      R"({"train_batch_size":16,"optimizer":{"type":"SGD","params":{"lr":0.05,"momentum":0.9}},
          "dstrain":{"num_threads":1}})",
      model);
  ASSERT_NE(e, nullptr);
  std::vector<float> x(16 * 4), y(16);
  float first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    for (int i = 0; i < 16; ++i) {
      float sum = 0;
      for (int j = 0; j < 4; ++j) {
        x[i * 4 + j] = std::sin(float(step * 64 + i * 4 + j));
        sum += x[i * 4 + j] * float(j + 1);
      }
      y[i] = 0.5f * sum;
    }
    dst_batch_t b;
    dst_batch_default(&b);
    b.n_samples = 16;
    b.inputs = x.data();
    b.inputs_count = x.size();
    b.labels = y.data();
    b.labels_count = y.size();
    float loss = 0;
    ASSERT_EQ(dst_engine_train_batch(e, &b, &loss), DST_OK) << dst_last_error();
    if (step == 0) first = loss;
    last = loss;
  }
  EXPECT_LT(last, 0.05f * first);
  dst_engine_destroy(e);
}

TEST(EngineCapi, MetricsSnapshotHasPhasesAndMemory) {
  dst_engine_t *e = CreateEngine(AdamWConfig(), kTinyGpt);
  ASSERT_NE(e, nullptr);
  TokenBatch b(2, 16, 3);
  ASSERT_EQ(dst_engine_train_batch(e, &b.batch, nullptr), DST_OK) << dst_last_error();
  const char *json = nullptr;
  ASSERT_EQ(dst_engine_metrics_json(e, &json), DST_OK);
  const std::string m = json;
  for (const char *key : {"\"step\":1", "\"forward\"", "\"backward\"", "\"tokens_per_sec\"",
                          "\"parameters\"", "\"optimizer_state\"", "\"activations\"", "\"lr\""})
    EXPECT_NE(m.find(key), std::string::npos) << key << " missing from " << m;
  dst_engine_destroy(e);
}

TEST(EngineCapi, MemoryStatusHasCategoriesProcessAndSystem) {
  dst_engine_t *e = CreateEngine(AdamWConfig(), kTinyGpt);
  ASSERT_NE(e, nullptr);
  TokenBatch b(2, 16, 3);
  ASSERT_EQ(dst_engine_train_batch(e, &b.batch, nullptr), DST_OK) << dst_last_error();
  const char *json = nullptr;
  ASSERT_EQ(dst_engine_memory_status(e, &json), DST_OK) << dst_last_error();
  const nlohmann::json m = nlohmann::json::parse(json);
  int64_t sum = 0;
  for (const char *c :
       {"parameters", "gradients", "optimizer_state", "activations", "communication", "offload"}) {
    ASSERT_TRUE(m["categories"].contains(c)) << c << " missing from " << json;
    sum += m["categories"][c]["bytes"].get<int64_t>();
    EXPECT_GE(m["categories"][c]["peak_bytes"].get<int64_t>(),
              m["categories"][c]["bytes"].get<int64_t>());
  }
  EXPECT_GT(m["categories"]["optimizer_state"]["bytes"].get<int64_t>(), 0);
  EXPECT_EQ(m["total"]["bytes"].get<int64_t>(), sum);
  EXPECT_GT(m["process"]["rss_bytes"].get<int64_t>(), 0);
  EXPECT_GE(m["process"]["peak_rss_bytes"].get<int64_t>(),
            m["process"]["rss_bytes"].get<int64_t>());
  EXPECT_GT(m["system"]["total_bytes"].get<int64_t>(),
            m["system"]["available_bytes"].get<int64_t>());
  EXPECT_EQ(dst_engine_memory_status(e, nullptr), DST_ERR_INVALID_ARGUMENT);
  dst_engine_destroy(e);
}

TEST(EngineCapi, ForwardBackwardExposesGradientsWithoutStepping) {
  dst_engine_t *e = CreateEngine(AdamWConfig(), kTinyGpt);
  ASSERT_NE(e, nullptr);
  TokenBatch b(2, 16, 5);
  float loss = 0;
  ASSERT_EQ(dst_engine_forward_backward(e, &b.batch, &loss), DST_OK) << dst_last_error();
  std::vector<float> g(32);
  ASSERT_EQ(dst_engine_get_grad(e, "transformer.ln_f.bias", g.data(), g.size()), DST_OK);
  double norm = 0;
  for (float v : g) norm += double(v) * v;
  EXPECT_GT(norm, 0.0);
  int64_t steps = -1;
  dst_engine_step_count(e, &steps);
  EXPECT_EQ(steps, 0);
  dst_engine_destroy(e);
}

}  // namespace
