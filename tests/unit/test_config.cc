// ds_config.json parsing: typed values, DeepSpeed's batch rules, "auto", and
// one test per kind of bad config, each checking the code and the words a
// user needs (path, expectation, finding, suggestion).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/config/config_file.h"
#include "core/config/config_keys.h"

namespace dst {
namespace {

Result<Config> Parse(std::string_view json, int64_t world_size = 1, int64_t total_steps = 0) {
  ConfigContext context;
  context.world_size = world_size;
  context.total_steps = total_steps;
  return ParseConfig(json, context);
}

const char *CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "kOk";
    case Code::kConfig:
      return "kConfig";
    case Code::kNotSupported:
      return "kNotSupported";
    case Code::kInvalidArgument:
      return "kInvalidArgument";
    case Code::kIo:
      return "kIo";
    default:
      return "other";
  }
}

// The result failed with `code` and its message contains every one of `parts`.
testing::AssertionResult FailsWith(const Result<Config> &result, Code code,
                                   std::initializer_list<std::string_view> parts) {
  if (result.ok()) return testing::AssertionFailure() << "parsed, but expected an error";
  const Status &status = result.status();
  if (status.code() != code) {
    return testing::AssertionFailure() << "code " << CodeName(status.code()) << " instead of "
                                       << CodeName(code) << ": " << status.message();
  }
  for (std::string_view part : parts) {
    if (status.message().find(part) == std::string::npos) {
      return testing::AssertionFailure() << "message lacks [" << part << "]: " << status.message();
    }
  }
  return testing::AssertionSuccess() << status.message();
}

#define ASSERT_PARSED(result) ASSERT_TRUE((result).ok()) << (result).status().message()

// A DeepSpeed config as its docs write one, with every supported feature set
// to something other than its default.
constexpr std::string_view kFullConfig = R"({
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 8,
  "steps_per_print": 50,
  "wall_clock_breakdown": true,
  "gradient_clipping": 0.5,
  "communication_data_type": "fp32",
  "optimizer": {
    "type": "Adam",
    "params": {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.1,
               "adam_w_mode": false, "torch_adam": true, "bias_correction": true}
  },
  "scheduler": {
    "type": "WarmupDecayLR",
    "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 3e-4, "warmup_num_steps": 100,
               "warmup_type": "linear", "total_num_steps": 1000}
  },
  "zero_optimization": {
    "stage": 0,
    "overlap_comm": true,
    "contiguous_gradients": false,
    "reduce_bucket_size": 2e8,
    "allgather_bucket_size": 300000000,
    "reduce_scatter": true,
    "allgather_partitions": true,
    "round_robin_gradients": false,
    "stage3_prefetch_bucket_size": 1000,
    "stage3_param_persistence_threshold": 2000,
    "stage3_max_live_parameters": 3000,
    "stage3_max_reuse_distance": 4000,
    "stage3_gather_16bit_weights_on_model_save": true,
    "sub_group_size": 1e9,
    "offload_optimizer": {"device": "none", "pin_memory": true},
    "offload_param": {"device": "none", "buffer_count": 5, "buffer_size": 1e8, "max_in_cpu": 1e9}
  },
  "fp16": {"enabled": false, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 500,
           "hysteresis": 3, "consecutive_hysteresis": false, "min_loss_scale": 0.5},
  "bf16": {"enabled": false},
  "activation_checkpointing": {"partition_activations": false, "cpu_checkpointing": false,
                               "contiguous_memory_optimization": false,
                               "number_checkpoints": 4, "synchronize_checkpoint_boundary": true,
                               "profile": true},
  "tensor_parallel": {"autotp_size": 1},
  "pipeline_parallel": {"enabled": false, "pp_size": 1},
  "zero_allow_untested_optimizer": true,
  "prescale_gradients": false,
  "gradient_predivide_factor": 1.0,
  "sparse_gradients": false,
  "dump_state": false,
  "tensorboard": {"enabled": false, "output_path": "logs/", "job_name": "run"},
  "wandb": {"enabled": false, "project": "p"},
  "data_types": {"grad_accum_dtype": "fp32"},
  "checkpoint": {"tag_validation": "fail", "load_universal": false,
                 "use_node_local_storage": true},
  "dstrain": {"num_threads": 4, "seed": 18446744073709551615}
})";

// ---------------------------------------------------------------------------
// Valid configs

TEST(ConfigParse, FullDeepSpeedConfigGivesTypedValues) {
  Result<Config> result = Parse(kFullConfig, /*world_size=*/2);
  ASSERT_PARSED(result);
  const Config &c = result.value();
  EXPECT_EQ(c.train_batch_size, 64);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 8);
  EXPECT_EQ(c.dp_size, 2);
  EXPECT_EQ(c.tp_size, 1);
  EXPECT_EQ(c.pp_size, 1);
  EXPECT_EQ(c.steps_per_print, 50);
  EXPECT_TRUE(c.wall_clock_breakdown);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 0.5);
  EXPECT_EQ(c.communication_data_type, DType::kFloat32);

  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdam);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[0], 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_FALSE(c.optimizer.adam_w_mode);

  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupDecayLR);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_min_lr, 1e-5);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 3e-4);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 100);
  EXPECT_EQ(c.scheduler.warmup_type, WarmupType::kLinear);
  EXPECT_EQ(c.scheduler.total_num_steps, 1000);

  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_TRUE(c.zero.overlap_comm);
  EXPECT_FALSE(c.zero.contiguous_gradients);
  EXPECT_EQ(c.zero.reduce_bucket_size, 200000000);
  EXPECT_EQ(c.zero.allgather_bucket_size, 300000000);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 1000);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 2000);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 3000);
  EXPECT_EQ(c.zero.stage3_max_reuse_distance, 4000);
  EXPECT_TRUE(c.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.zero.offload_optimizer_device, "none");
  EXPECT_EQ(c.zero.offload_param_device, "none");

  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.initial_scale_power, 12);
  EXPECT_EQ(c.fp16.loss_scale_window, 500);
  EXPECT_EQ(c.fp16.hysteresis, 3);
  EXPECT_DOUBLE_EQ(c.fp16.min_loss_scale, 0.5);
  EXPECT_FALSE(c.bf16_enabled);

  EXPECT_EQ(c.activation_checkpointing.number_checkpoints, 4);
  EXPECT_TRUE(c.activation_checkpointing.synchronize_checkpoint_boundary);
  EXPECT_TRUE(c.activation_checkpointing.profile);

  EXPECT_EQ(c.runtime.num_threads, 4);
  EXPECT_EQ(c.runtime.seed, 18446744073709551615ULL);
}

TEST(ConfigParse, MinimalConfigTakesDeepSpeedDefaults) {
  Result<Config> result = Parse(R"({"train_micro_batch_size_per_gpu": 2})");
  ASSERT_PARSED(result);
  const Config &c = result.value();
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[0], 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kNone);
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 0.0);
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_EQ(c.runtime.seed, 1234u);
  EXPECT_EQ(c.runtime.num_threads, 0);
}

// The six ways DeepSpeed completes the batch identity
// train_batch_size = micro * accumulation * data-parallel size.
TEST(ConfigBatch, AllThreeGivenAndConsistent) {
  Result<Config> result = Parse(
      R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
          "gradient_accumulation_steps": 2})",
      /*world_size=*/4);
  ASSERT_PARSED(result);
  EXPECT_EQ(result->dp_size, 4);
  EXPECT_EQ(result->gradient_accumulation_steps, 2);
}

TEST(ConfigBatch, BatchAndMicroDeriveAccumulation) {
  Result<Config> result =
      Parse(R"({"train_batch_size": 48, "train_micro_batch_size_per_gpu": 4})", 3);
  ASSERT_PARSED(result);
  EXPECT_EQ(result->gradient_accumulation_steps, 4);
  EXPECT_EQ(result->train_micro_batch_size_per_gpu, 4);
}

TEST(ConfigBatch, BatchAndAccumulationDeriveMicro) {
  Result<Config> result = Parse(R"({"train_batch_size": 48, "gradient_accumulation_steps": 3})", 2);
  ASSERT_PARSED(result);
  EXPECT_EQ(result->train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(result->gradient_accumulation_steps, 3);
}

TEST(ConfigBatch, MicroAndAccumulationDeriveBatch) {
  Result<Config> result =
      Parse(R"({"train_micro_batch_size_per_gpu": 5, "gradient_accumulation_steps": 3})", 2);
  ASSERT_PARSED(result);
  EXPECT_EQ(result->train_batch_size, 30);
}

TEST(ConfigBatch, OnlyBatchMeansNoAccumulation) {
  Result<Config> result = Parse(R"({"train_batch_size": 16})", 4);
  ASSERT_PARSED(result);
  EXPECT_EQ(result->gradient_accumulation_steps, 1);
  EXPECT_EQ(result->train_micro_batch_size_per_gpu, 4);
}

TEST(ConfigBatch, OnlyMicroMeansNoAccumulation) {
  Result<Config> result = Parse(R"({"train_micro_batch_size_per_gpu": 6})", 2);
  ASSERT_PARSED(result);
  EXPECT_EQ(result->gradient_accumulation_steps, 1);
  EXPECT_EQ(result->train_batch_size, 12);
}

TEST(ConfigBatch, PipelineMicroBatchesAreTheAccumulationSteps) {
  Result<Config> result =
      Parse(R"({"train_micro_batch_size_per_gpu": 2, "pipeline_parallel": {"micro_batches": 4}})");
  ASSERT_PARSED(result);
  EXPECT_EQ(result->gradient_accumulation_steps, 4);
  EXPECT_EQ(result->pipeline_micro_batches, 4);
  EXPECT_EQ(result->train_batch_size, 8);
}

// The Hugging Face Trainer's ZeRO template with every "auto" it writes.
TEST(ConfigAuto, HuggingFaceTemplateResolves) {
  Result<Config> result = Parse(R"({
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000,
             "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW",
                  "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                             "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 0, "reduce_bucket_size": "auto",
                          "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto"},
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 2000,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": 8,
    "wall_clock_breakdown": false
  })",
                                /*world_size=*/1, /*total_steps=*/500);
  ASSERT_PARSED(result);
  const Config &c = result.value();
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_FALSE(c.bf16_enabled);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 1e-3);  // = optimizer lr
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_min_lr, 0.0);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 0);
  EXPECT_EQ(c.scheduler.total_num_steps, 500);  // = context.total_steps
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 50000000);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.train_batch_size, 8);

  // The resolved JSON has no "auto" left and carries the filled values.
  EXPECT_EQ(c.resolved_json.find("auto"), std::string::npos) << c.resolved_json;
  const nlohmann::json resolved = nlohmann::json::parse(c.resolved_json);
  EXPECT_EQ(resolved["scheduler"]["params"]["total_num_steps"], 500);
  EXPECT_EQ(resolved["train_batch_size"], 8);
  EXPECT_EQ(resolved["gradient_clipping"], 1.0);
  EXPECT_NE(c.resolved_json.find("\n  \"train_batch_size\": 8"), std::string::npos) << "indent 2";
}

TEST(ConfigAuto, WarmupMaxLrFollowsAnExplicitOptimizerLr) {
  Result<Config> result = Parse(R"({"train_batch_size": 8,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.02}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": "auto"}}})");
  ASSERT_PARSED(result);
  EXPECT_DOUBLE_EQ(result->scheduler.warmup_max_lr, 0.02);
  EXPECT_EQ(result->scheduler.warmup_num_steps, 1000);  // DeepSpeed's default when absent
}

TEST(ConfigOptimizer, TypeIsCaseInsensitive) {
  const std::pair<const char *, OptimizerType> cases[] = {{"adamw", OptimizerType::kAdamW},
                                                          {"ADAM", OptimizerType::kAdam},
                                                          {"Sgd", OptimizerType::kSGD},
                                                          {"AdamW", OptimizerType::kAdamW}};
  for (const auto &[name, type] : cases) {
    const std::string json = std::string(R"({"train_batch_size": 1, "optimizer": {"type": ")") +
                             name + R"(", "params": {"lr": 0.1}}})";
    Result<Config> result = Parse(json);
    ASSERT_PARSED(result);
    EXPECT_EQ(result->optimizer.type, type) << name;
  }
}

TEST(ConfigOptimizer, AdamDecouplesWeightDecayByDefaultAsDeepSpeed) {
  Result<Config> result =
      Parse(R"({"train_batch_size": 1, "optimizer": {"type": "Adam", "params": {}}})");
  ASSERT_PARSED(result);
  EXPECT_TRUE(result->optimizer.adam_w_mode);
}

TEST(ConfigOptimizer, SgdParameters) {
  Result<Config> result = Parse(R"({"train_batch_size": 1, "optimizer": {"type": "SGD",
    "params": {"lr": 0.1, "momentum": 0.9, "dampening": 0, "weight_decay": 1e-4,
               "nesterov": true}}})");
  ASSERT_PARSED(result);
  EXPECT_EQ(result->optimizer.type, OptimizerType::kSGD);
  EXPECT_DOUBLE_EQ(result->optimizer.momentum, 0.9);
  EXPECT_DOUBLE_EQ(result->optimizer.weight_decay, 1e-4);
  EXPECT_TRUE(result->optimizer.nesterov);
}

TEST(ConfigScheduler, WarmupCosineLrDefaultsAndRatios) {
  Result<Config> result = Parse(R"({"train_batch_size": 1, "scheduler": {
    "type": "WarmupCosineLR", "params": {"total_num_steps": 5000, "warmup_min_ratio": 0.1}}})");
  ASSERT_PARSED(result);
  EXPECT_EQ(result->scheduler.type, SchedulerType::kWarmupCosineLR);
  EXPECT_DOUBLE_EQ(result->scheduler.warmup_min_ratio, 0.1);
  EXPECT_DOUBLE_EQ(result->scheduler.cos_min_ratio, 0.0001);
  EXPECT_EQ(result->scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(result->scheduler.warmup_type, WarmupType::kLog);
}

TEST(ConfigParse, ResolvedJsonParsesBackToTheSameConfig) {
  Result<Config> first = Parse(kFullConfig, 2);
  ASSERT_PARSED(first);
  Result<Config> second = Parse(first->resolved_json, 2);
  ASSERT_PARSED(second);
  EXPECT_EQ(second->resolved_json, first->resolved_json);
  EXPECT_EQ(second->optimizer.adam_w_mode, first->optimizer.adam_w_mode);
  EXPECT_EQ(second->scheduler.total_num_steps, first->scheduler.total_num_steps);
  EXPECT_EQ(second->runtime.seed, first->runtime.seed);
}

TEST(ConfigParse, AcceptsAliasesAndDisabledDeepSpeedFeatures) {
  Result<Config> result = Parse(R"({"train_batch_size": 2,
    "bfloat16": {"enabled": false},
    "elasticity": {"enabled": false, "max_train_batch_size": 2000},
    "flops_profiler": {"enabled": false, "profile_step": 1, "module_depth": -1},
    "comms_logger": {"enabled": false, "prof_ops": ["all_reduce"]},
    "amp": {"enabled": false, "opt_level": "O1"},
    "pipeline": {"stages": "auto", "partition": "parameters", "seed_layers": false},
    "tensor_parallel": {"enabled": false, "tp_size": 1},
    "communication_data_type": "FP32",
    "zero_optimization": {"stage3_gather_fp16_weights_on_model_save": true}})");
  ASSERT_PARSED(result);
  EXPECT_FALSE(result->bf16_enabled);
  EXPECT_TRUE(result->zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(result->pp_size, 1);
}

TEST(ConfigParse, LoadConfigFileReadsAndNamesThePath) {
  const std::string path = testing::TempDir() + "dstrain_test_config.json";
  {
    std::ofstream out(path);
    out << R"({"train_batch_size": 4, "zero_optimization": {"stage": 5}})";
  }
  Result<Config> bad = LoadConfigFile(path, ConfigContext{});
  EXPECT_TRUE(FailsWith(bad, Code::kConfig, {path + ": zero_optimization.stage"}));
  {
    std::ofstream out(path);
    out << R"({"train_batch_size": 4})";
  }
  Result<Config> good = LoadConfigFile(path, ConfigContext{});
  ASSERT_PARSED(good);
  EXPECT_EQ(good->train_batch_size, 4);
  std::remove(path.c_str());

  EXPECT_TRUE(FailsWith(LoadConfigFile(path, ConfigContext{}), Code::kIo,
                        {"cannot open config file", path, "No such file"}));
  EXPECT_TRUE(
      FailsWith(LoadConfigFile(testing::TempDir(), ConfigContext{}), Code::kIo, {"directory"}));
}

TEST(ConfigKeys, TableHasNoDuplicatesAndRendersAsMarkdown) {
  std::set<std::pair<std::string_view, std::string_view>> seen;
  for (const ConfigKeyInfo &info : KnownConfigKeys()) {
    EXPECT_TRUE(seen.insert({info.section, info.key}).second)
        << info.section << "." << info.key << " twice";
    EXPECT_FALSE(info.accepts.empty()) << info.key;
    EXPECT_FALSE(info.doc.empty()) << info.key;
  }
  const std::string markdown = ConfigKeysMarkdown();
  EXPECT_NE(markdown.find("### zero_optimization"), std::string::npos);
  EXPECT_NE(markdown.find("| `train_micro_batch_size_per_gpu` |"), std::string::npos);
}

// ---------------------------------------------------------------------------
// Malformed or inconsistent configs

TEST(ConfigErrors, MalformedJsonReportsLineAndColumn) {
  EXPECT_TRUE(FailsWith(Parse("{\n  \"train_batch_size\": 8,,\n  \"x\": 1\n}"), Code::kConfig,
                        {"malformed JSON at line 2, column 25", "unexpected ','"}));
  EXPECT_TRUE(FailsWith(Parse("{\"train_batch_size\": 8"), Code::kConfig,
                        {"malformed JSON at line 1, column 23", "unexpected end of input"}));
}

TEST(ConfigErrors, NumberTooLargeForADoubleReportsPosition) {
  EXPECT_TRUE(FailsWith(Parse("{\n\"gradient_clipping\": 1e999}"), Code::kConfig,
                        {"line 2, column 22", "number overflow"}));
}

TEST(ConfigErrors, EmptyText) {
  EXPECT_TRUE(FailsWith(Parse(" \n "), Code::kConfig, {"the config is empty"}));
}

TEST(ConfigErrors, RootMustBeAnObject) {
  EXPECT_TRUE(FailsWith(Parse("[1, 2]"), Code::kConfig,
                        {"expected a JSON object at the root", "found [1, 2]"}));
  EXPECT_TRUE(FailsWith(Parse("\"auto\""), Code::kConfig, {"found \"auto\""}));
}

TEST(ConfigErrors, DuplicateKeyNamesItsPath) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 4,
    "zero_optimization": {"stage": 0, "stage": 2}})"),
                        Code::kConfig, {"duplicate key \"stage\" in zero_optimization"}));
}

TEST(ConfigErrors, UnknownTopLevelKeySuggestsNearest) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_micro_batch_size": 4})"), Code::kConfig,
                        {"unknown key \"train_micro_batch_size\" at top level; did you mean "
                         "\"train_micro_batch_size_per_gpu\"?"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"zero_optimisation": {}})"), Code::kConfig,
                        {"did you mean \"zero_optimization\"?"}));
}

TEST(ConfigErrors, UnknownNestedKeySuggestsNearest) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 4, "zero_optimization": {"stag": 1}})"),
                        Code::kConfig,
                        {"unknown key \"stag\" in zero_optimization; did you mean \"stage\"?"}));
  EXPECT_TRUE(FailsWith(
      Parse(
          R"({"train_batch_size": 4, "zero_optimization": {"offload_param": {"devcie": "cpu"}}})"),
      Code::kConfig, {"in zero_optimization.offload_param; did you mean \"device\"?"}));
}

TEST(ConfigErrors, MisplacedKeyNamesWhereItBelongs) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 4, "lr": 0.1})"), Code::kConfig,
                        {"unknown key \"lr\" at top level", "belongs in optimizer.params"}));
  EXPECT_TRUE(FailsWith(
      Parse(
          R"({"train_batch_size": 4,
              "optimizer": {"type": "AdamW", "params": {"momentum": 0.9}}})"),
      Code::kConfig,
      {"unknown key \"momentum\" in optimizer.params (type AdamW)", "parameter of type SGD"}));
}

TEST(ConfigErrors, WrongTypeNamesPathExpectedAndFound) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": "32"})"), Code::kConfig,
                        {"train_batch_size: expected a positive integer, \"auto\" or null, found "
                         "\"32\""}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 4, "wall_clock_breakdown": 1})"),
                        Code::kConfig, {"wall_clock_breakdown: expected true or false, found 1"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 4, "zero_optimization": 2})"), Code::kConfig,
                        {"zero_optimization: expected an object, found 2"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2.5})"), Code::kConfig, {"found 2.5"}));
}

TEST(ConfigErrors, NegativeAndHugeNumbers) {
  EXPECT_TRUE(
      FailsWith(Parse(R"({"train_micro_batch_size_per_gpu": -4})"), Code::kConfig,
                {"train_micro_batch_size_per_gpu: expected a positive integer", "found -4"}));
  EXPECT_TRUE(FailsWith(
      Parse(R"({"train_batch_size": 4, "zero_optimization": {"reduce_bucket_size": -1}})"),
      Code::kConfig, {"zero_optimization.reduce_bucket_size: expected an integer >= 0"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1e30})"), Code::kConfig, {"found 1e+30"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 18446744073709551615})"), Code::kConfig,
                        {"found 18446744073709551615"}));
}

TEST(ConfigErrors, BatchIdentityViolationShowsTheNumbers) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                                  "gradient_accumulation_steps": 2})"),
                        Code::kConfig,
                        {"train_batch_size 32 != train_micro_batch_size_per_gpu 4 * "
                         "gradient_accumulation_steps 2 * data-parallel size 1 (= 8); fix one of "
                         "them or set train_batch_size to \"auto\""}));
}

TEST(ConfigErrors, AccumulationThatDoesNotDivide) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})"),
                        Code::kConfig,
                        {"train_batch_size 30 is not a multiple of train_micro_batch_size_per_gpu "
                         "4 * data-parallel size 1 (= 4)",
                         "gradient_accumulation_steps cannot be derived"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 6})", /*world_size=*/4), Code::kConfig,
                        {"not a multiple of the data-parallel size 4"}));
}

TEST(ConfigErrors, MissingBatchKeys) {
  EXPECT_TRUE(FailsWith(Parse(R"({"gradient_accumulation_steps": 4})"), Code::kConfig,
                        {"no batch size", "train_batch_size or train_micro_batch_size_per_gpu"}));
  EXPECT_TRUE(
      FailsWith(Parse(R"({"train_batch_size": "auto"})"), Code::kConfig, {"no batch size"}));
}

TEST(ConfigErrors, PipelineMicroBatchesDisagreeWithAccumulation) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 2, "pipeline_parallel": {"micro_batches": 4}})"),
                        Code::kConfig,
                        {"pipeline_parallel.micro_batches 4 != gradient_accumulation_steps 2"}));
}

TEST(ConfigErrors, UnknownOptimizerSuggestsAName) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "optimizer": {"type": "AdamX"}})"),
                        Code::kConfig,
                        {"optimizer.type: expected one of Adam, AdamW, SGD, Lamb, OneBitAdam, "
                         "ZeroOneAdam, OneBitLamb (any case), found "
                         "\"AdamX\"; did you mean \"Adam\"?"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "optimizer": {"params": {}}})"),
                        Code::kConfig, {"optimizer.type is missing"}));
}

TEST(ConfigErrors, LambReadsFusedLambsParameters) {
  Result<Config> c = Parse(R"({"train_batch_size": 1, "optimizer": {"type": "lamb", "params":
      {"lr": 0.5, "max_coeff": 0.3, "min_coeff": 0.08, "bias_correction": false,
       "eps_inside_sqrt": true}}})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->optimizer.type, OptimizerType::kLamb);
  EXPECT_EQ(c->optimizer.max_coeff, 0.3);
  EXPECT_EQ(c->optimizer.min_coeff, 0.08);
  EXPECT_FALSE(c->optimizer.bias_correction);
  EXPECT_TRUE(c->optimizer.eps_inside_sqrt);
  EXPECT_TRUE(FailsWith(
      Parse(
          R"({"train_batch_size": 1, "optimizer": {"type": "Lamb", "params": {"max_grad_norm": 1}}})"),
      Code::kNotSupported, {"optimizer.params.max_grad_norm", "gradient_clipping"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "optimizer": {"type": "Adagrad"}})"),
                        Code::kNotSupported,
                        {"optimizer.type: \"Adagrad\" is not supported yet",
                         "Adam, AdamW, SGD, Lamb, OneBitAdam, ZeroOneAdam and OneBitLamb"}));
}

TEST(ConfigErrors, OneBitAdamIsReadAndItsSiblingsPointAtIt) {
  Result<Config> c = Parse(R"({"train_batch_size": 1, "optimizer": {"type": "OneBitAdam",
      "params": {"lr": 1e-4, "freeze_step": 400, "cuda_aware": false,
                 "comm_backend_name": "nccl", "bias_correction": true}}})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->optimizer.type, OptimizerType::kOneBitAdam);
  EXPECT_EQ(c->optimizer.freeze_step, 400);
  EXPECT_FALSE(c->optimizer.bias_correction);  // DeepSpeed's OnebitAdam has none
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "optimizer": {"type": "OneBitAdam"},
                "zero_optimization": {"stage": 1}})"),
                        Code::kNotSupported, {"\"OneBitAdam\" with zero_optimization.stage 1"}));
  Result<Config> z = Parse(R"({"train_batch_size": 1, "optimizer": {"type": "ZeroOneAdam",
      "params": {"var_freeze_step": 12500, "local_step_scaler": 32678}}})");
  ASSERT_TRUE(z.ok()) << z.status().message();
  EXPECT_EQ(z->optimizer.type, OptimizerType::kZeroOneAdam);
  EXPECT_EQ(z->optimizer.var_freeze_step, 12500);
  EXPECT_EQ(z->optimizer.var_update_scaler, 16);
  EXPECT_EQ(z->optimizer.local_step_clipper, 16);
  Result<Config> l = Parse(R"({"train_batch_size": 1, "optimizer": {"type": "OneBitLamb",
      "params": {"freeze_step": 400, "max_coeff": 0.3, "coeff_beta": 0.8, "factor_max": 3}}})");
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l->optimizer.type, OptimizerType::kOneBitLamb);
  EXPECT_EQ(l->optimizer.max_coeff, 0.3);
  EXPECT_EQ(l->optimizer.coeff_beta, 0.8);
  EXPECT_EQ(l->optimizer.factor_max, 3.0);
  EXPECT_EQ(l->optimizer.factor_min, 0.5);
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "optimizer": {"type": "OneBitLamb",
                "params": {"factor_min": 5, "factor_max": 4}}})"),
                        Code::kConfig, {"factor_min"}));
}

TEST(Config, OverrideModulesAreReadForTheEnabled16BitMode) {
  Result<Config> fp16 = Parse(R"({"train_batch_size": 1,
                "fp16": {"enabled": true, "fp16_override_modules": ["layernorm", "Embedding"]}})");
  ASSERT_TRUE(fp16.ok()) << fp16.status().message();
  EXPECT_EQ(fp16.value().fp32_modules(), (std::vector<std::string>{"LayerNorm", "Embedding"}));
  Result<Config> bf16 = Parse(R"({"train_batch_size": 1,
                "bfloat16": {"enabled": true, "bf16_override_modules": ["Linear"]}})");
  ASSERT_TRUE(bf16.ok()) << bf16.status().message();
  EXPECT_EQ(bf16.value().fp32_modules(), (std::vector<std::string>{"Linear"}));
  // A list under a mode that is off asks for nothing: fp32 training is fp32.
  Result<Config> off = Parse(R"({"train_batch_size": 1,
                "fp16": {"enabled": false, "fp16_override_modules": ["LayerNorm"]}})");
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off.value().fp32_modules().empty());
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1,
                "fp16": {"enabled": true, "fp16_override_modules": ["BatchNorm"]}})"),
                        Code::kConfig, {"unknown layer type \"BatchNorm\"", "LayerNorm"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1,
                "bf16": {"enabled": true, "bf16_override_modules": "LayerNorm"}})"),
                        Code::kConfig, {"bf16.bf16_override_modules", "a list of layer types"}));
}

TEST(ConfigErrors, BadBetas) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1,
                "optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.5]}}})"),
                        Code::kConfig,
                        {"optimizer.params.betas[1]: expected a number in [0, 1), found 1.5"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1,
                "optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})"),
                        Code::kConfig,
                        {"optimizer.params.betas: expected [beta1, beta2]", "found [0.9]"}));
}

TEST(ConfigErrors, AdamWCannotTurnOffDecoupledDecay) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1,
                "optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})"),
                        Code::kConfig, {"optimizer.params.adam_w_mode", "\"type\": \"Adam\""}));
}

TEST(ConfigErrors, UnknownAndUnsupportedSchedulers) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "scheduler": {"type": "WarmupLr2"}})"),
                        Code::kConfig,
                        {"scheduler.type: expected one of WarmupLR", "found \"WarmupLr2\"",
                         "did you mean \"WarmupLR\"?"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "scheduler": {"type": "OneCycle",
                                  "params": {"cycle_min_lr": 0}}})"),
                        Code::kNotSupported, {"\"OneCycle\" is not supported yet"}));
}

TEST(ConfigErrors, WarmupDecayLrNeedsTotalSteps) {
  EXPECT_TRUE(FailsWith(
      Parse(R"({"train_batch_size": 1, "scheduler": {"type": "WarmupDecayLR", "params": {}}})"),
      Code::kConfig, {"scheduler.params.total_num_steps is missing", "WarmupDecayLR"}));
}

TEST(ConfigErrors, TotalStepsAutoNeedsTheStepCount) {
  constexpr std::string_view kJson = R"({"train_batch_size": 1, "scheduler": {
    "type": "WarmupCosineLR", "params": {"total_num_steps": "auto", "warmup_num_steps": 10}}})";
  EXPECT_TRUE(FailsWith(Parse(kJson), Code::kConfig,
                        {"scheduler.params.total_num_steps is \"auto\"",
                         "pass the number of steps (e.g. dstrain train --steps N) or write a "
                         "number"}));
  Result<Config> with_steps = Parse(kJson, 1, /*total_steps=*/100);
  ASSERT_PARSED(with_steps);
  EXPECT_EQ(with_steps->scheduler.total_num_steps, 100);
}

TEST(ConfigErrors, TotalStepsMustExceedWarmup) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "scheduler": {"type": "WarmupDecayLR",
    "params": {"warmup_num_steps": 1000, "total_num_steps": 500}}})"),
                        Code::kConfig,
                        {"scheduler.params.total_num_steps: expected more than warmup_num_steps "
                         "1000, found 500"}));
}

TEST(ConfigErrors, BadWarmupType) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "scheduler": {"type": "WarmupLR",
    "params": {"warmup_type": "cosine"}}})"),
                        Code::kConfig,
                        {"scheduler.params.warmup_type: expected \"log\" or \"linear\", found "
                         "\"cosine\""}));
}

TEST(Config, ZeroStages2And3Parse) {
  Result<Config> c = Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
    "stage3_prefetch_bucket_size": 5000, "stage3_param_persistence_threshold": 64}})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value().zero.stage, 3);
  EXPECT_EQ(c.value().zero.stage3_prefetch_bucket_size, 5000);
  EXPECT_EQ(c.value().zero.stage3_param_persistence_threshold, 64);
  c = Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2, "overlap_comm": true}})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value().zero.stage, 2);
}

TEST(Config, ZeroStage1Parses) {
  Result<Config> c = Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 1}})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value().zero.stage, 1);
}

TEST(ConfigErrors, ZeroStage9IsInvalid) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 9}})"),
                        Code::kConfig,
                        {"zero_optimization.stage: expected 0, 1, 2 or 3, found 9"}));
}

// CPU offload is accepted (the CPU engine's state is in host memory: the
// resolved config's notes say so); the optimizer's NVMe tier at ZeRO 1-3
// with DeepSpeed's keys; parameters on NVMe are not built yet.
TEST(ConfigErrors, CpuOffloadIsAcceptedOptimizerNvmeToo) {
  Result<Config> cpu = Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
    "offload_optimizer": {"device": "cpu", "pin_memory": true},
    "offload_param": {"device": "cpu"}}})");
  ASSERT_PARSED(cpu);
  EXPECT_EQ(cpu->zero.offload_optimizer_device, "cpu");
  EXPECT_NE(cpu->resolved_json.find("keeps the optimizer state and fp32 master weights in host "
                                    "memory already"),
            std::string::npos);
  EXPECT_NE(cpu->resolved_json.find("keeps the parameters in host memory already"),
            std::string::npos);
  Result<Config> nvme = Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 1,
    "sub_group_size": 1e6, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp",
    "buffer_count": 6, "pipeline_read": true, "pipeline_write": false, "fast_init": false,
    "pin_memory": true, "ratio": 1.0}}, "aio": {"block_size": 262144, "queue_depth": 16,
    "thread_count": 2, "single_submit": false, "overlap_events": true, "use_gds": false}})");
  ASSERT_PARSED(nvme);
  EXPECT_EQ(nvme->zero.offload_optimizer_device, "nvme");
  EXPECT_EQ(nvme->zero.offload_optimizer_nvme_path, "/tmp");
  EXPECT_EQ(nvme->zero.offload_optimizer_buffer_count, 6);
  EXPECT_TRUE(nvme->zero.offload_optimizer_pipeline_read);
  EXPECT_FALSE(nvme->zero.offload_optimizer_pipeline_write);
  EXPECT_EQ(nvme->zero.sub_group_size, 1000000);
  EXPECT_EQ(nvme->aio.block_size, 262144);
  EXPECT_EQ(nvme->aio.queue_depth, 16);
  EXPECT_EQ(nvme->aio.intra_op_parallelism, 2);  // thread_count: DeepSpeed's old name
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "aio": {"use_gds": true}})"),
                        Code::kNotSupported, {"aio.use_gds", "no GPU path"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 2,
    "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp", "ratio": 0.5}}})"),
                        Code::kNotSupported, {"offload_optimizer.ratio"}));
  const Result<Config> params = Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
    "offload_param": {"device": "nvme", "nvme_path": "/tmp", "buffer_count": 3,
                      "buffer_size": 1e6, "max_in_cpu": 1000}}})");
  ASSERT_TRUE(params.ok()) << params.status().message();
  EXPECT_EQ(params->zero.offload_param_nvme_path, "/tmp");
  EXPECT_EQ(params->zero.offload_param_buffer_count, 3);
  EXPECT_EQ(params->zero.offload_param_buffer_size, 1000000);
  EXPECT_EQ(params->zero.offload_param_max_in_cpu, 1000);
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "zero_optimization": {
    "offload_optimizer": {"device": "cpu"}}})"),
                        Code::kConfig, {"needs ZeRO stage 1, 2 or 3"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
    "offload_param": {"device": "nvme"}}})"),
                        Code::kConfig, {"offload_param.nvme_path is missing"}));
}

TEST(ConfigPrecision, Fp16AndBf16SetThePrecisionAndTheDefaultCommunicationType) {
  Result<Config> fp16 = Parse(R"({"train_batch_size": 1, "fp16": {"enabled": true,
      "consecutive_hysteresis": true}})");
  ASSERT_TRUE(fp16.ok()) << fp16.status().message();
  EXPECT_EQ(fp16->precision(), DType::kFloat16);
  EXPECT_EQ(fp16->communication_data_type, DType::kFloat16);  // DeepSpeed: the grads' dtype
  EXPECT_TRUE(fp16->fp16.consecutive_hysteresis);
  Result<Config> bf16 = Parse(R"({"train_batch_size": 1, "bf16": {"enabled": true},
      "communication_data_type": "fp32"})");
  ASSERT_TRUE(bf16.ok()) << bf16.status().message();
  EXPECT_EQ(bf16->precision(), DType::kBFloat16);
  EXPECT_EQ(bf16->communication_data_type, DType::kFloat32);
  Result<Config> fp32 = Parse(R"({"train_batch_size": 1})");
  ASSERT_TRUE(fp32.ok());
  EXPECT_EQ(fp32->precision(), DType::kFloat32);
  EXPECT_EQ(fp32->communication_data_type, DType::kFloat32);
}

TEST(ConfigErrors, Fp16AndBf16TogetherConflict) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "fp16": {"enabled": true},
                                  "bf16": {"enabled": true}})"),
                        Code::kConfig, {"fp16.enabled and bf16.enabled are both true"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "bf16": {}, "bfloat16": {}})"),
                        Code::kConfig, {"bf16 and bfloat16 are both given"}));
}

TEST(ConfigTensorParallel, BothSpellingsSplitTheWorld) {
  Result<Config> tutorial = Parse(R"({"train_batch_size": 4,
                                  "tensor_parallel": {"enabled": true, "tp_size": 2}})",
                                  4);
  ASSERT_PARSED(tutorial);
  EXPECT_EQ(tutorial->tp_size, 2);
  EXPECT_EQ(tutorial->dp_size, 2);  // tp does not multiply the batch
  Result<Config> deepspeed =
      Parse(R"({"train_batch_size": 2, "tensor_parallel": {"autotp_size": 4}})", 4);
  ASSERT_PARSED(deepspeed);
  EXPECT_EQ(deepspeed->tp_size, 4);
  EXPECT_EQ(deepspeed->dp_size, 1);
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2,
                                  "tensor_parallel": {"enabled": false, "tp_size": 2}})"),
                        Code::kConfig, {"tensor_parallel.enabled is false"}));
  Result<Config> sp = Parse(R"({"train_batch_size": 2,
                                "tensor_parallel": {"tp_size": 2, "sequence_parallel": true}})",
                            2);
  ASSERT_PARSED(sp);
  EXPECT_TRUE(sp->sequence_parallel);
}

TEST(ConfigPipeline, TheMicroBatchesKeyIsNamedWhereItWasWritten) {
  // micro_batches stands for the accumulation: an error names it, not a key never written.
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 8,
      "pipeline_parallel": {"pp_size": 2, "micro_batches": 3}})",
                              2),
                        Code::kConfig, {"pipeline_parallel.micro_batches 3"}));
  const Result<Config> r = Parse(R"({"train_batch_size": 8,
      "pipeline_parallel": {"pp_size": 2, "micro_batches": 3}})",
                                 2);
  EXPECT_EQ(r.status().message().find("gradient_accumulation_steps"), std::string::npos)
      << r.status().message();
}

TEST(ConfigPipeline, BothSpellingsAndTheDivisibilityRule) {
  Result<Config> tutorial = Parse(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
      "pipeline_parallel": {"enabled": true, "pp_size": 2, "micro_batches": 4}})",
                                  2);
  ASSERT_PARSED(tutorial);
  EXPECT_EQ(tutorial->pp_size, 2);
  EXPECT_EQ(tutorial->dp_size, 1);  // pp does not multiply the batch
  EXPECT_EQ(tutorial->gradient_accumulation_steps, 4);
  Result<Config> deepspeed = Parse(R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1,
      "pipeline": {"stages": 4, "partition_method": "type:transformer", "schedule": "interleaved",
                   "virtual_stages": 2, "activation_checkpoint_interval": 1}})",
                                   8);
  ASSERT_PARSED(deepspeed);
  EXPECT_EQ(deepspeed->pp_size, 4);
  EXPECT_EQ(deepspeed->dp_size, 2);
  EXPECT_EQ(deepspeed->pipeline.partition_method, "type:transformer");
  EXPECT_EQ(deepspeed->pipeline.schedule, "interleaved");
  EXPECT_EQ(deepspeed->pipeline.virtual_stages, 2);
  EXPECT_TRUE(deepspeed->recompute_activations());
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2, "pipeline": {"stages": 4}})", 6),
                        Code::kConfig,
                        {"world size 6 is not divisible", "pipeline-parallel size 4"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 8, "gradient_accumulation_steps": 2,
      "pipeline_parallel": {"pp_size": 2, "micro_batches": 4}})",
                              2),
                        Code::kConfig,
                        {"pipeline_parallel.micro_batches 4 != gradient_accumulation_steps 2"}));
}

TEST(ConfigPipeline, RefusalsNameTheSetting) {
  EXPECT_TRUE(
      Parse(R"({"train_batch_size": 2, "pipeline": {"stages": 2, "schedule": "zb-h1"}})", 2).ok());
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2, "pipeline": {"virtual_stages": 2}})"),
                        Code::kConfig, {"pipeline.virtual_stages is 2", "\"interleaved\""}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2, "pipeline": {"partition": "balanced"}})"),
                        Code::kConfig, {"\"balanced\" is not a partition method"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2, "activation_checkpointing": {
      "recompute_granularity": "selective"}, "pipeline": {"activation_checkpoint_interval": 2}})"),
                        Code::kConfig, {"two kinds of recomputation", "choose one"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2, "activation_checkpointing": {
      "recompute_granularity": "attention"}})"),
                        Code::kConfig, {"recompute_granularity", "\"selective\""}));
}

TEST(ConfigPipeline, ActivationCheckpointingTurnsRecomputationOn) {
  Result<Config> plain = Parse(R"({"train_batch_size": 1})");
  ASSERT_PARSED(plain);
  EXPECT_FALSE(plain->recompute_activations());
  Result<Config> section = Parse(R"({"train_batch_size": 1, "activation_checkpointing": {
      "partition_activations": true, "cpu_checkpointing": true}})");
  ASSERT_PARSED(section);
  EXPECT_TRUE(section->recompute_activations());
  EXPECT_NE(section->resolved_json.find("nothing to partition"), std::string::npos);
  EXPECT_NE(section->resolved_json.find("host memory already"), std::string::npos);
  Result<Config> off = Parse(R"({"train_batch_size": 1, "activation_checkpointing": {},
      "pipeline": {"activation_checkpoint_interval": 0}})");
  ASSERT_PARSED(off);
  EXPECT_FALSE(off->recompute_activations());
  // DeepSpeed's interval: groups of that many layers.
  Result<Config> every3 = Parse(R"({"train_batch_size": 1,
      "pipeline": {"activation_checkpoint_interval": 3}})");
  ASSERT_PARSED(every3);
  EXPECT_EQ(every3->recompute_interval(), 3);
  EXPECT_NE(every3->resolved_json.find("full, every 3 layers"), std::string::npos);
  // Megatron's selective recomputation: no full recomputation.
  Result<Config> selective = Parse(R"({"train_batch_size": 1, "activation_checkpointing": {
      "recompute_granularity": "selective"}})");
  ASSERT_PARSED(selective);
  EXPECT_TRUE(selective->selective_recompute());
  EXPECT_FALSE(selective->recompute_activations());
  EXPECT_NE(selective->resolved_json.find("selective (every transformer block"), std::string::npos);
}

// target "update": every rank keeps its whole optimizer, so ZeRO 0 only;
// the refusals name the key and the way out.
TEST(ConfigErrors, CompressedUpdatesNeedStageZeroAndTheOptimizerInMemory) {
  const Result<Config> update = Parse(R"({"train_batch_size": 2, "gradient_compression": {
                                  "algorithm": "1bit", "target": "update", "chunk_size": 256}})");
  ASSERT_TRUE(update.ok()) << update.status().message();
  EXPECT_EQ(update->gradient_compression.target, "update");
  EXPECT_EQ(update->gradient_compression.chunk_size, 256);
  const Result<Config> plain =
      Parse(R"({"train_batch_size": 2, "gradient_compression": {"algorithm": "1bit"}})");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->gradient_compression.target, "gradient");
  EXPECT_EQ(plain->gradient_compression.chunk_size, 2048);
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2, "zero_optimization": {"stage": 1},
                                  "gradient_compression": {"target": "update"}})"),
                        Code::kNotSupported,
                        {"target \"update\" at zero_optimization.stage 1", "Use stage 0"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2,
                                  "optimizer": {"type": "SGD", "params": {"lr": 0.1,
                                                                         "momentum": 0.9}},
                                  "gradient_clipping": 0,
                                  "gradient_compression": {"target": "update",
                                                           "momentum_correction": true}})"),
                        Code::kConfig, {"momentum_correction", "Remove momentum_correction"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2, "gradient_compression": {
                                  "target": "weights"}})"),
                        Code::kConfig, {"gradient_compression.target", "\"update\""}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2, "gradient_compression": {
                                  "chunk_size": 0}})"),
                        Code::kConfig, {"gradient_compression.chunk_size"}));
}

// The articles' communication settings are recognised and refused by name
// with what to use meanwhile, never "unknown key".
TEST(ConfigErrors, ArticlesCommunicationSectionsAreReadOrRefusedByName) {
  const Result<Config> topk = Parse(R"({"train_batch_size": 1, "gradient_compression": {
                                  "algorithm": "topk", "topk_ratio": 0.01,
                                  "huffman_coding": true}})");
  ASSERT_TRUE(topk.ok()) << topk.status().message();
  EXPECT_TRUE(topk->gradient_compression.enabled);
  EXPECT_EQ(topk->gradient_compression.algorithm, "topk");
  EXPECT_EQ(topk->gradient_compression.topk_ratio, 0.01);
  EXPECT_TRUE(topk->gradient_compression.huffman_coding);
  const Result<Config> onebit =
      Parse(R"({"train_batch_size": 1, "gradient_compression": {"algorithm": "1BIT"}})");
  ASSERT_TRUE(onebit.ok()) << onebit.status().message();
  EXPECT_EQ(onebit->gradient_compression.algorithm, "1bit");
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "gradient_compression": {
                                  "algorithm": "2bit", "huffman_coding": true}})"),
                        Code::kConfig, {"huffman_coding", "top-k's indices"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "gradient_compression": {
                                  "topk_ratio": 0}})"),
                        Code::kConfig, {"gradient_compression.topk_ratio"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "gradient_compression": {
                                  "algorithm": "powersgd"}})"),
                        Code::kConfig, {"gradient_compression.algorithm", "\"topk\""}));
  EXPECT_EQ(Parse(R"({"train_batch_size": 1, "communication": {"topology": "Ring"}})")
                ->communication.topology,
            "ring");
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "communication": {"topology": "mesh"}})"),
                        Code::kConfig, {"communication.topology"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "communication": {"topology": 2}})"),
                        Code::kNotSupported, {"communication.topology 2", "use 3"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "communication": {
                                  "slow_node_tolerance": -1}})"),
                        Code::kConfig, {"communication.slow_node_tolerance"}));
  const Result<Config> off = Parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3},
    "gradient_compression": {"enabled": false}, "communication": {"enabled": false}})");
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_FALSE(off->gradient_compression.enabled);
  // ZeRO 2/3: the sparse reduce-scatter, on the host only.
  const Result<Config> sharded = Parse(R"({"train_batch_size": 2, "zero_optimization": {"stage": 3},
    "gradient_compression": {"algorithm": "topk", "huffman_coding": true}})");
  ASSERT_TRUE(sharded.ok()) << sharded.status().message();
  EXPECT_EQ(sharded->gradient_compression.warmup_steps, 0);
  EXPECT_EQ(Parse(R"({"train_batch_size": 1, "gradient_compression": {"warmup_steps": 30}})")
                ->gradient_compression.warmup_steps,
            30);
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "gradient_compression": {
                                  "warmup_steps": -1}})"),
                        Code::kConfig, {"gradient_compression.warmup_steps"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 2, "zero_optimization": {"stage": 2},
    "gradient_compression": {"algorithm": "1bit"}, "dstrain": {"device": "cuda"}})"),
                        Code::kNotSupported, {"stage 2", "not supported yet", "stage 0 or 1"}));
}

TEST(ConfigErrors, CommunicationDataType) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "communication_data_type": "int8"})"),
                        Code::kConfig,
                        {"communication_data_type: expected \"fp32\", \"fp16\", \"bf16\" or null, "
                         "found \"int8\""}));
  // fp32 training with a 16-bit wire, named or by compress_communication.
  const Result<Config> bf16_wire =
      Parse(R"({"train_batch_size": 1, "communication_data_type": "bf16"})");
  ASSERT_TRUE(bf16_wire.ok()) << bf16_wire.status().message();
  EXPECT_EQ(bf16_wire->communication_data_type, DType::kBFloat16);
  const Result<Config> compressed =
      Parse(R"({"train_batch_size": 1, "compress_communication": true})");
  ASSERT_TRUE(compressed.ok()) << compressed.status().message();
  EXPECT_EQ(compressed->communication_data_type, DType::kBFloat16);
  const Result<Config> compressed_fp16 = Parse(R"({"train_batch_size": 1,
    "compress_communication": true, "communication_data_type": "fp16"})");
  ASSERT_TRUE(compressed_fp16.ok()) << compressed_fp16.status().message();
  EXPECT_EQ(compressed_fp16->communication_data_type, DType::kFloat16);
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "compress_communication": true,
                                  "communication_data_type": "fp32"})"),
                        Code::kConfig, {"compress_communication: true", "drop one of them"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "fp16": {"enabled": true},
                                  "communication_data_type": "bf16"})"),
                        Code::kNotSupported, {"\"bf16\" while training in fp16"}));
}

TEST(ConfigErrors, SgdNeedsALearningRate) {
  // torch.optim.SGD requires lr; a silent default would train at a rate nobody chose.
  for (const char *text : {R"({"train_batch_size": 1, "optimizer": {"type": "SGD"}})",
                           R"({"train_batch_size": 1, "optimizer": {"type": "SGD",
                               "params": {"momentum": 0.9}}})"})
    EXPECT_TRUE(FailsWith(Parse(text), Code::kConfig, {"optimizer.params.lr", "SGD"})) << text;
}

TEST(ConfigErrors, NesterovNeedsMomentum) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "optimizer": {"type": "SGD",
    "params": {"lr": 0.1, "nesterov": true}}})"),
                        Code::kConfig,
                        {"optimizer.params.nesterov: Nesterov momentum needs momentum > 0 and "
                         "dampening 0",
                         "found momentum 0.0"}));
}

TEST(ConfigErrors, NumThreadsNegative) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "dstrain": {"num_threads": -2}})"),
                        Code::kConfig,
                        {"dstrain.num_threads: expected an integer >= 0", "found -2"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "dstrain": {"seed": -1}})"), Code::kConfig,
                        {"dstrain.seed: expected an integer in [0, 2^64)"}));
}

TEST(ConfigErrors, ActivationCheckpointingOptions) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1,
    "activation_checkpointing": {"contiguous_memory_optimization": true}})"),
                        Code::kConfig, {"needs partition_activations: true"}));
}

TEST(ConfigErrors, PastedDeepSpeedExtrasThatAreNotBuilt) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "tensorboard": {"enabled": true}})"),
                        Code::kNotSupported, {"tensorboard.enabled", "use dstrain.monitor"}));
  Result<Config> pre = Parse(R"({"train_batch_size": 1, "prescale_gradients": true,
                                  "gradient_predivide_factor": 2})");
  ASSERT_TRUE(pre.ok()) << pre.status().message();
  EXPECT_TRUE(pre->prescale_gradients);
  EXPECT_EQ(pre->gradient_predivide_factor, 2.0);
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "gradient_predivide_factor": 0})"),
                        Code::kConfig, {"gradient_predivide_factor"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "amp": {"enabled": true}})"),
                        Code::kNotSupported, {"amp.enabled"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "elasticity": {"enabled": true}})"),
                        Code::kNotSupported, {"elasticity: this DeepSpeed feature"}));
  EXPECT_TRUE(
      FailsWith(Parse(R"({"train_batch_size": 1, "data_types": {"grad_accum_dtype": "bf16"}})"),
                Code::kNotSupported, {"data_types.grad_accum_dtype: \"bf16\""}));
  EXPECT_TRUE(FailsWith(
      Parse(R"({"train_batch_size": 1, "checkpoint": {"tag_validation": "Maybe"}})"), Code::kConfig,
      {"checkpoint.tag_validation: expected \"Ignore\", \"Warn\" or \"Fail\""}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1, "optimizer": {"type": "Adam",
                "params": {"amsgrad": true}}})"),
                        Code::kNotSupported, {"amsgrad", "DeepSpeed's FusedAdam"}));
  Result<Config> raw = Parse(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW",
                "params": {"bias_correction": false}}})");
  ASSERT_TRUE(raw.ok()) << raw.status().message();
  EXPECT_FALSE(raw->optimizer.bias_correction);
}

TEST(ConfigErrors, InvalidContextIsAnInvalidArgument) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1})", /*world_size=*/0),
                        Code::kInvalidArgument, {"world_size must be >= 1"}));
}

// Hostile inputs must end in an error, never in a crash or a long message.
TEST(ConfigErrors, DeeplyNestedValuesAreShortened) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Result<Config> root = Parse(deep);
  EXPECT_TRUE(FailsWith(root, Code::kConfig, {"found [[[...]]]"}));
  Result<Config> nested = Parse(R"({"train_batch_size": )" + deep + "}");
  EXPECT_TRUE(FailsWith(nested, Code::kConfig, {"train_batch_size: expected"}));
  EXPECT_LT(nested.status().message().size(), 200u);
}

TEST(ConfigErrors, EveryTruncationOfAValidConfigFailsCleanly) {
  for (size_t length = 0; length < kFullConfig.size() - 1; ++length) {
    Result<Config> result = Parse(kFullConfig.substr(0, length), 2);
    ASSERT_FALSE(result.ok()) << length;
    ASSERT_EQ(result.status().code(), Code::kConfig) << result.status().message();
  }
}

TEST(ConfigMonitor, DefaultsAreOffAndLoopback) {
  Result<Config> c = Parse(R"({"train_batch_size": 1})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->monitor.enabled);
  EXPECT_FALSE(c->monitor.http.enabled);
  EXPECT_EQ(c->monitor.http.host, "127.0.0.1");
  EXPECT_EQ(c->monitor.http.port, 9400);
  EXPECT_FALSE(c->monitor.log.enabled);
}

TEST(ConfigMonitor, HttpOrLogImpliesRegistryAndTokenIsNotEchoed) {
  Result<Config> c = Parse(R"({"train_batch_size": 1, "dstrain": {"monitor": {
      "job": "run-7", "history_steps": 50,
      "http": {"enabled": true, "port": 9500, "token": "s3cret"},
      "log": {"enabled": true, "path": "/tmp/m", "format": "jsonl"}}}})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->monitor.enabled);
  EXPECT_EQ(c->monitor.job, "run-7");
  EXPECT_EQ(c->monitor.history_steps, 50);
  EXPECT_EQ(c->monitor.http.port, 9500);
  EXPECT_EQ(c->monitor.http.token, "s3cret");
  EXPECT_EQ(c->monitor.log.format, "jsonl");
  EXPECT_EQ(c->resolved_json.find("s3cret"), std::string::npos);
  EXPECT_NE(c->resolved_json.find("<set>"), std::string::npos);
}

TEST(ConfigMonitor, DeepSpeedCsvMonitorTurnsOnTheCsvLog) {
  Result<Config> c = Parse(R"({"train_batch_size": 1,
      "csv_monitor": {"enabled": true, "output_path": "logs", "job_name": "exp1"}})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->monitor.enabled);
  EXPECT_TRUE(c->monitor.log.enabled);
  EXPECT_EQ(c->monitor.log.format, "csv");
  EXPECT_EQ(c->monitor.log.path, "logs/exp1");
}

TEST(ConfigMonitor, BadValuesNameThePath) {
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1,
      "dstrain": {"monitor": {"http": {"port": 70000}}}})"),
                        Code::kConfig, {"dstrain.monitor.http.port"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1,
      "dstrain": {"monitor": {"log": {"format": "xml"}}}})"),
                        Code::kConfig, {"dstrain.monitor.log.format"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1,
      "dstrain": {"monitor": {"job": "a b"}}})"),
                        Code::kConfig, {"dstrain.monitor.job"}));
  EXPECT_TRUE(FailsWith(Parse(R"({"train_batch_size": 1,
      "dstrain": {"monitor": {"htpp": {}}}})"),
                        Code::kConfig, {"http"}));
}

// ---------------------------------------------------------------------------
// The one config-file reader (engine, estimate, LoadConfigFile, the CLI).

std::string ReaderError(const std::string &path) {
  Result<std::string> text = ReadConfigFile(path, "config");
  EXPECT_FALSE(text.ok()) << path;
  return text.ok() ? "" : text.status().message();
}

TEST(ConfigFile, ReadsARegularFileAndRefusesEverythingElseByName) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/dstrain_reader.json";
  {
    std::ofstream out(path);
    out << R"({"train_batch_size": 4})";
  }
  Result<std::string> text = ReadConfigFile(path, "config");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(text.value(), R"({"train_batch_size": 4})");
  std::remove(path.c_str());
  EXPECT_NE(ReaderError(path).find("cannot open config file " + path), std::string::npos);
  EXPECT_NE(ReaderError(dir).find("is a directory"), std::string::npos);
  // A device would grow memory without bound; a FIFO with no writer would block.
  EXPECT_NE(ReaderError("/dev/zero").find("is a character device"), std::string::npos);
  const std::string fifo = dir + "/dstrain_reader.fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(ReaderError(fifo).find("is a FIFO"), std::string::npos);
  std::remove(fifo.c_str());
  // Oversized (sparse: costs no disk): the size and the limit are named.
  const std::string big = dir + "/dstrain_reader_big.json";
  { std::ofstream out(big); }
  ASSERT_EQ(truncate(big.c_str(), kMaxConfigFileBytes + 1), 0);
  const std::string message = ReaderError(big);
  EXPECT_NE(message.find(std::to_string(kMaxConfigFileBytes + 1) + " bytes"), std::string::npos)
      << message;
  EXPECT_NE(message.find(std::to_string(kMaxConfigFileBytes)), std::string::npos);
  std::remove(big.c_str());
}

TEST(ConfigFile, TextOrFileWantsExactlyOne) {
  EXPECT_EQ(TextOrFile("{}", "", "model").value(), "{}");
  EXPECT_FALSE(TextOrFile("{}", "/x", "model").ok());
  EXPECT_FALSE(TextOrFile("", "", "model").ok());
}

// "Did you mean" on a huge unknown key answers at once (a 1 MB key took 8 s:
// an O(n m) edit-distance table per known key).
TEST(ConfigErrors, AHugeUnknownKeyIsReportedQuickly) {
  const std::string key(1 << 20, 'x');
  const auto start = std::chrono::steady_clock::now();
  Result<Config> config = ParseConfig("{\"" + key + "\": 1}", ConfigContext{});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("unknown key"), std::string::npos);
  // A quadratic nearest-key search over the 1 MiB key would take minutes;
  // the sanitizers slow everything by up to ~10x.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr double kSlowdown = 10;
#else
  constexpr double kSlowdown = 1;
#endif
  EXPECT_LT(seconds, 2.0 * kSlowdown);
}

}  // namespace
}  // namespace dst

namespace dst {
namespace {

// A pasted config's stray top-level keys: an error by default (naming the
// nearest key), ignored with a warning naming each under unknown_keys "warn";
// keys inside sections stay strict.
TEST(ConfigUnknownKeys, WarnLetsStrayTopLevelKeysThrough) {
  const char *stray =
      R"({"train_batch_size": 1, "my_experiment_tag": "x", "zero_allow_untested_optimizer": true,
                          "dstrain": {"unknown_keys": "warn"}})";
  Result<Config> ok = Parse(stray);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->runtime.ignored_keys,
            (std::vector<std::string>{"my_experiment_tag"}));  // a known key is not ignored
  Result<Config> strict = Parse(R"({"train_batch_size": 1, "my_experiment_tag": "x"})");
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("my_experiment_tag"), std::string::npos);
  Result<Config> inner =
      Parse(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW", "params": {"lrr": 1}},
          "dstrain": {"unknown_keys": "warn"}})");
  ASSERT_FALSE(inner.ok());
  EXPECT_NE(inner.status().message().find("lrr"), std::string::npos);
  Result<Config> bad = Parse(R"({"train_batch_size": 1, "dstrain": {"unknown_keys": "ignore"}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dstrain.unknown_keys"), std::string::npos);
}

}  // namespace
}  // namespace dst
