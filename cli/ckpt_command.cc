#include "ckpt_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_error.h"
#include "dstrain/dstrain.h"

namespace dstrain_cli {

namespace {

std::string Megabytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MB", double(bytes) / 1e6);
  return text;
}

std::string Text(const nlohmann::json &j) {
  return j.is_string() ? j.get<std::string>() : j.dump();
}

void PrintInspection(const nlohmann::json &c) {
  const nlohmann::json &topo = c["topology"];
  std::printf("checkpoint %s (tag %s)\n", Text(c["path"]).c_str(), Text(c["tag"]).c_str());
  std::printf("  step            %s\n", Text(c["step"]).c_str());
  std::printf("  saved by        dstrain %s, format %s\n", Text(c["dstrain_version"]).c_str(),
              Text(c["format_version"]).c_str());
  if (topo.is_object())
    std::printf("  layout          world %s, dp %s, tp %s, pp %s, ZeRO stage %s, %s\n",
                Text(topo["world_size"]).c_str(), Text(topo["dp_size"]).c_str(),
                Text(topo["tp_size"]).c_str(), Text(topo["pp_size"]).c_str(),
                Text(topo["zero_stage"]).c_str(), Text(c["precision"]).c_str());
  std::printf("  parameters      %s\n", Text(c["num_parameters"]).c_str());
  const nlohmann::json &opt = c["optimizer"];
  if (opt.is_object())
    std::printf("  optimizer       %s, %s steps, state %s\n", Text(opt["type"]).c_str(),
                Text(opt["steps_taken"]).c_str(), Text(opt["states"]).c_str());
  const nlohmann::json &lr = c["lr_scheduler"];
  if (lr.is_object()) std::printf("  next lr         %s\n", Text(lr["next_lr"]).c_str());
  if (!c["loss_scaler"].is_null())
    std::printf("  loss scaler     %s\n", c["loss_scaler"].dump().c_str());
  if (!c["client_state"].is_null())
    std::printf("  client state    %s\n", c["client_state"].dump().c_str());
  std::printf("  files (%s in all)\n", Megabytes(c["total_bytes"].get<uint64_t>()).c_str());
  for (const auto &f : c["files"]) {
    const bool ok = f["verified"].get<bool>();
    std::printf("    %-34s %12s  %s\n", Text(f["name"]).c_str(),
                Megabytes(f["bytes"].get<uint64_t>()).c_str(),
                ok ? "checksum ok" : ("BAD: " + Text(f["error"])).c_str());
  }
  if (c["shards"].is_array() && !c["shards"].empty()) {
    std::printf("  optimizer shards (flat elements)\n");
    for (const auto &s : c["shards"])
      std::printf("    rank %-4s [%s, %s)  %s\n", Text(s["rank"]).c_str(), Text(s["begin"]).c_str(),
                  Text(s["end"]).c_str(), Text(s["file"]).c_str());
  }
  if (c.contains("own_states") && c["own_states"].is_array()) {
    std::printf("  each rank's own state (restored by a load in this layout)\n");
    for (const auto &s : c["own_states"]) {
      if (!s.is_object()) continue;
      std::string buffers;
      const nlohmann::json tensors = s.value("tensors", nlohmann::json::object());
      for (const auto &[name, numel] : tensors.items())
        buffers += (buffers.empty() ? "" : ", ") + name + " [" + Text(numel) + "]";
      std::printf("    rank %-4s %s  %s\n", Text(s.value("rank", nlohmann::json())).c_str(),
                  Text(s.value("file", nlohmann::json())).c_str(), buffers.c_str());
    }
  }
  if (c.contains("tensors")) {
    std::printf("  weights (%zu tensors, fp32)\n", c["tensors"].size());
    for (const auto &t : c["tensors"])
      std::printf("    %-44s %s %s\n", Text(t["name"]).c_str(), Text(t["dtype"]).c_str(),
                  t["shape"].dump().c_str());
  }
  std::printf("%s\n", c["valid"].get<bool>() ? "valid: every file matches its checksum"
                                             : "INVALID: see the files marked BAD above");
}

}  // namespace

CkptCommand::CkptCommand(CLI::App &parent) {
  app_ = parent.add_subcommand("ckpt", "Inspect or export a checkpoint directory");
  app_->require_subcommand(1);
  inspect_ = app_->add_subcommand("inspect", "Print what a checkpoint holds and verify its files");
  inspect_->add_option("dir", dir_, "checkpoint directory (holds 'latest' and tag folders)")
      ->required();
  inspect_->add_option("--tag", tag_, "tag to inspect (default: the one named by DIR/latest)");
  inspect_->add_flag("--json", json_, "print the raw JSON");
  export_ = app_->add_subcommand(
      "export",
      "Write the weights: one fp32 safetensors file, or a Hugging Face model directory");
  export_->add_option("dir", dir_, "checkpoint directory")->required();
  export_->add_option("--tag", tag_, "tag to export (default: the one named by DIR/latest)");
  export_->add_option("--out", out_,
                      "output: a file (model.safetensors) or, with --format hf, a new directory")
      ->required();
  export_
      ->add_option("--format", format_,
                   "safetensors: dstrain's names, fp32, one file; hf: a Hugging Face model "
                   "directory (config.json, the family's names and layouts, sharded)")
      ->check(CLI::IsMember({"safetensors", "hf"}));
  export_->add_option("--dtype", dtype_, "with --format hf: fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  export_->add_option("--max-shard-size", max_shard_size_,
                      "with --format hf: the largest shard (5GB, 500MB, 2GiB, bytes)");
}

int CkptCommand::Run() {
  if (inspect_->parsed()) return Inspect();
  return Export();
}

int CkptCommand::Inspect() {
  const char *json = nullptr;
  Check(dst_checkpoint_inspect_json(dir_.c_str(), tag_.empty() ? nullptr : tag_.c_str(), &json),
        "inspecting checkpoint " + dir_);
  const nlohmann::json c = nlohmann::json::parse(json);
  if (json_)
    std::printf("%s\n", json);
  else
    PrintInspection(c);
  return c["valid"].get<bool>() ? kExitOk : kExitFailure;
}

int CkptCommand::Export() {
  if (format_ == "hf") {
    Check(dst_checkpoint_export_hf(dir_.c_str(), tag_.empty() ? nullptr : tag_.c_str(),
                                  out_.c_str(), dtype_.c_str(), max_shard_size_.c_str()),
          "exporting " + dir_);
    std::printf("dstrain: wrote %s as a Hugging Face model directory (%s) to %s\n", dir_.c_str(),
                dtype_.c_str(), out_.c_str());
    return kExitOk;
  }
  if (dtype_ != "fp32" || export_->count("--max-shard-size"))
    UsageError("--dtype and --max-shard-size are for --format hf (safetensors is fp32, one file)");
  Check(dst_checkpoint_export_weights(dir_.c_str(), tag_.empty() ? nullptr : tag_.c_str(),
                                      out_.c_str()),
        "exporting " + dir_);
  std::printf("dstrain: wrote the consolidated fp32 weights of %s to %s\n", dir_.c_str(),
              out_.c_str());
  return kExitOk;
}

}  // namespace dstrain_cli
