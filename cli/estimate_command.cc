#include "estimate_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_error.h"
#include "default_job.h"
#include "dstrain/dstrain.h"
#include "format.h"

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
  app_->add_option(
      "--model", model_path_,
      "model spec JSON, or a Hugging Face model directory (default: the built-in GPT)");
  app_->add_option("--world-size", world_size_, "number of ranks")->check(CLI::PositiveNumber);
  app_->add_option("--memory-per-rank", memory_per_rank_,
                   "memory budget of one rank (e.g. 16GiB, 2e9): list every dp x tp x pp of the "
                   "world size and suggest one that fits");
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

// Every dp x tp x pp of the world size, its per-rank peak against the
// budget, and the suggestion: the most data parallelism that fits, then the
// least tensor parallelism (the order the layouts come in).
void PrintLayouts(const nlohmann::json &layouts, int64_t budget) {
  std::printf("\nlayouts for a budget of %s per rank (model state + activations):\n",
              Mebibytes(budget).c_str());
  std::printf("%-5s %-5s %-5s %16s  %s\n", "dp", "tp", "pp", "peak per rank", "");
  const nlohmann::json *suggested = nullptr;
  for (const auto &l : layouts) {
    const bool fits = l.contains("peak_bytes") && l["peak_bytes"].get<int64_t>() <= budget;
    const bool first = fits && suggested == nullptr;
    if (first) suggested = &l;
    std::printf("%-5lld %-5lld %-5lld %16s  %s\n", l["dp"].get<long long>(),
                l["tp"].get<long long>(), l["pp"].get<long long>(),
                l.contains("peak_bytes") ? Mebibytes(l["peak_bytes"]).c_str() : "-",
                l.contains("error")
                    ? ("cannot run: " + l["error"].get<std::string>()).c_str()
                    : (first ? "fits  <- suggested" : (fits ? "fits" : "does not fit")));
  }
  if (suggested)
    std::printf(
        "suggested: dp %lld x tp %lld x pp %lld (the most data parallelism that fits, then the "
        "least tensor parallelism): \"tensor_parallel\": {\"tp_size\": %lld}, "
        "\"pipeline_parallel\": {\"pp_size\": %lld}\n",
        (*suggested)["dp"].get<long long>(), (*suggested)["tp"].get<long long>(),
        (*suggested)["pp"].get<long long>(), (*suggested)["tp"].get<long long>(),
        (*suggested)["pp"].get<long long>());
  else
    std::printf(
        "no layout of this world size fits %s per rank: add ranks, use a higher ZeRO stage, "
        "activation checkpointing or a smaller micro-batch\n",
        Mebibytes(budget).c_str());
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
  const auto &r = e["per_rank"];
  std::printf(
      "\nper rank (the largest stage): model state %s + activations %s (%lld micro-batch%s in "
      "flight, %lld thread%s)%s = %s\n",
      Mebibytes(r["model_state_bytes"]).c_str(), Mebibytes(r["activation_bytes"]).c_str(),
      r["micro_batches_in_flight"].get<long long>(), r["micro_batches_in_flight"] == 1 ? "" : "es",
      e["threads"].get<long long>(), e["threads"] == 1 ? "" : "s",
      r["step_gradient_bytes"] > 0
          ? (" + step gradients " + Mebibytes(r["step_gradient_bytes"])).c_str()
          : "",
      Mebibytes(r["total_bytes"]).c_str());
  if (!memory_per_rank_.empty())
    PrintLayouts(e["layouts"], ParseBytes(memory_per_rank_, "--memory-per-rank"));
  return kExitOk;
}

}  // namespace dstrain_cli
