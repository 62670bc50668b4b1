#include "trainer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "batch_source.h"
#include "cli_error.h"

namespace dstrain_cli {

Trainer::Trainer(dst_engine_t *engine, BatchSource &batches, int64_t dp_size, int64_t eval_batches)
    : engine_(engine), batches_(batches), dp_size_(dp_size), eval_batches_(eval_batches) {
  const char *text = nullptr;
  Check(dst_engine_config_json(engine_, &text), "reading the resolved config");
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, false);
  if (config.is_object() && config.contains("fp16") && config["fp16"].is_object())
    fp16_ = config["fp16"].value("enabled", false);
}

std::optional<Trainer::LossScaleState> Trainer::LossScale() const {
  if (!fp16_) return std::nullopt;
  LossScaleState state;
  Check(dst_engine_loss_scale(engine_, &state.scale, &state.skipped_steps),
        "reading the loss scale");
  return state;
}

const char *Trainer::rate_unit() const {
  return std::string(batches_.unit()) == "tokens" ? "tok/s" : "samples/s";
}

size_t Trainer::tokens_per_step() const {
  return batches_.units_per_batch() * size_t(dp_size_);
}

double Trainer::TrainStep(int64_t step) {
  const dst_batch_t batch = batches_.Fill(DST_SPLIT_TRAIN, static_cast<uint64_t>(step));
  float loss = 0.0f;
  Check(dst_engine_train_batch(engine_, &batch, &loss),
        "training step " + std::to_string(step + 1));
  return loss;
}

double Trainer::Evaluate() {
  double sum = 0.0;
  for (int64_t i = 0; i < eval_batches_; ++i) {
    const dst_batch_t batch = batches_.Fill(DST_SPLIT_VAL, static_cast<uint64_t>(i));
    float loss = 0.0f;
    Check(dst_engine_eval_batch(engine_, &batch, &loss),
          "evaluating validation batch " + std::to_string(i));
    sum += loss;
  }
  return eval_batches_ > 0 ? sum / static_cast<double>(eval_batches_) : 0.0;
}

double Trainer::LearningRate() const {
  double lr = 0.0;
  Check(dst_engine_learning_rate(engine_, &lr), "reading the learning rate");
  return lr;
}

int64_t Trainer::StepCount() const {
  int64_t steps = 0;
  Check(dst_engine_step_count(engine_, &steps), "reading the step count");
  return steps;
}

std::string Trainer::MemoryStatusLine() const {
  const char *text = nullptr;
  Check(dst_engine_memory_status(engine_, &text), "reading the memory status");
  const nlohmann::json m = nlohmann::json::parse(text);
  auto mib = [](const nlohmann::json &bytes) {
    char out[32];
    std::snprintf(out, sizeof out, "%.1f", bytes.get<double>() / double(1 << 20));
    return std::string(out);
  };
  std::string line = "memory (MiB, now/peak):";
  for (const auto &[name, c] : m["categories"].items())
    if (c["peak_bytes"].get<int64_t>() > 0)
      line += " " + name + " " + mib(c["bytes"]) + "/" + mib(c["peak_bytes"]);
  line += " | total " + mib(m["total"]["bytes"]) + "/" + mib(m["total"]["peak_bytes"]);
  if (const nlohmann::json &device = m["device"]; device["name"] != "cpu")  // of the total
    line += " | on " + device["name"].get<std::string>() + " " + mib(device["bytes"]) + "/" +
            mib(device["peak_bytes"]);
  line += " | RSS " + mib(m["process"]["rss_bytes"]) + "/" + mib(m["process"]["peak_rss_bytes"]);
  line += " | system available " + mib(m["system"]["available_bytes"]) + " of " +
          mib(m["system"]["total_bytes"]);
  return line;
}

std::string Trainer::SaveCheckpoint(const std::string &dir, uint64_t data_seed) {
  const int64_t step = StepCount();
  const nlohmann::json client_state = {{"data_seed", data_seed}, {"next_batch_index", step}};
  Check(dst_engine_save_checkpoint(engine_, dir.c_str(), nullptr, client_state.dump().c_str()),
        "saving the checkpoint of step " + std::to_string(step) + " to '" + dir + "'");
  return LatestCheckpointPath(dir);
}

std::string LatestCheckpointPath(const std::string &dir) {
  std::ifstream latest(std::filesystem::path(dir) / "latest");
  std::string tag;
  if (!std::getline(latest, tag) || tag.empty()) return dir;
  return (std::filesystem::path(dir) / tag).string();
}

}  // namespace dstrain_cli
