#include "estimate_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_error.h"
#include "default_job.h"
#include "dstrain/dstrain.h"

namespace dstrain_cli {

namespace {

std::string Mebibytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", double(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

EstimateCommand::EstimateCommand(CLI::App &parent) {
  app_ = parent.add_subcommand(
      "estimate", "Per-rank model-state memory (params, grads, optimizer) for ZeRO stages 0-3");
  app_->add_option("--config", config_path_, "ds_config.json (default: the built-in job's)");
  app_->add_option("--model", model_path_, "model spec JSON (default: the built-in GPT)");
  app_->add_option("--world-size", world_size_, "number of ranks")->check(CLI::PositiveNumber);
  app_->add_flag("--json", json_, "print the raw JSON");
}

namespace {

// Layers per pipeline rank, their parameters, model state at the configured
// ZeRO stage and saved activations at the schedule's peak.
void PrintPipeline(const nlohmann::json &p) {
  std::printf(
      "\npipeline: %lld stages x %lld virtual, schedule %s, partition %s, %lld "
      "micro-batches per step\n",
      p["stages"].get<long long>(), p["virtual_stages"].get<long long>(),
      p["schedule"].get<std::string>().c_str(), p["partition_method"].get<std::string>().c_str(),
      p["micro_batches"].get<long long>());
  std::printf("%-5s %-24s %12s %14s %10s %16s\n", "rank", "layers", "parameters", "model state",
              "in flight", "activations");
  for (const auto &r : p["ranks"]) {
    std::string layers;
    for (const auto &c : r["chunks"]) {
      if (!layers.empty()) layers += " + ";
      layers += std::to_string(c["first"].get<long long>()) + "-" +
                std::to_string(c["last"].get<long long>());
    }
    std::printf("%-5lld %-24s %12lld %14s %10lld %16s\n", r["rank"].get<long long>(),
                layers.c_str(), r["parameters"].get<long long>(),
                Mebibytes(r["model_state_bytes"]).c_str(),
                r["micro_batches_in_flight"].get<long long>(),
                Mebibytes(r["saved_activation_bytes"]).c_str());
  }
  for (const auto &r : p["ranks"])
    if (r["step_gradient_bytes"].get<long long>() > 0)
      std::printf(
          "rank %lld also holds %s during a step: ZeRO 2 accumulates the stage's gradients "
          "over its micro-batches and reduces each layer once\n",
          r["rank"].get<long long>(), Mebibytes(r["step_gradient_bytes"]).c_str());
}

}  // namespace

int EstimateCommand::Run() {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  const std::string default_config = DefaultConfigJson();
  if (config_path_.empty())
    opts.config_json = default_config.c_str();
  else
    opts.config_path = config_path_.c_str();
  if (model_path_.empty())
    opts.model_json = DefaultModelJson();
  else
    opts.model_path = model_path_.c_str();
  opts.total_steps = 1000000;  // only resolves "auto" schedule lengths; irrelevant to memory
  const char *json = nullptr;
  Check(dst_estimate_memory_json(&opts, world_size_, &json), "estimating memory");
  if (json_) {
    std::printf("%s\n", json);
    return kExitOk;
  }
  const nlohmann::json e = nlohmann::json::parse(json);
  std::printf(
      "model: %lld parameters (%lld per tensor-parallel rank); world size %lld = dp %lld x tp "
      "%lld x pp %lld; %s; optimizer state %lld bytes/parameter%s\n",
      e["num_parameters"].get<long long>(), e["parameters_per_rank"].get<long long>(),
      e["world_size"].get<long long>(), e["dp_size"].get<long long>(),
      e["tp_size"].get<long long>(), e["pp_size"].get<long long>(),
      e["precision"].get<std::string>().c_str(),
      e["optimizer_state_bytes_per_parameter"].get<long long>(),
      e["precision"] == "fp32" ? "" : " (fp32 master weights included)");
  std::printf("%-7s %14s %14s %16s %14s  %s\n", "stage", "parameters", "gradients",
              "optimizer state", "total/rank", "");
  for (const auto &s : e["stages"]) {
    const bool supported = s["supported"].get<bool>();
    const bool configured = s["stage"] == e["configured_stage"];
    std::printf("%-7d %14s %14s %16s %14s  %s%s\n", s["stage"].get<int>(),
                Mebibytes(s["parameters_bytes"]).c_str(), Mebibytes(s["gradients_bytes"]).c_str(),
                Mebibytes(s["optimizer_state_bytes"]).c_str(), Mebibytes(s["total_bytes"]).c_str(),
                configured ? "<- configured " : "",
                supported ? "" : "(not supported by this build yet)");
  }
  if (e.contains("pipeline")) PrintPipeline(e["pipeline"]);
  return kExitOk;
}

}  // namespace dstrain_cli
