#include "trainer.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_error.h"

namespace dstrain_cli {

Trainer::Trainer(dst_engine_t *engine, const dst_dataset_t *dataset, BatchShape shape,
                 int64_t eval_batches)
    : engine_(engine),
      dataset_(dataset),
      shape_(shape),
      eval_batches_(eval_batches),
      tokens_(shape.num_elements()),
      targets_(shape.num_elements()) {
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

void Trainer::FillBatch(dst_split_t split, uint64_t batch_index) {
  Check(dst_dataset_batch(dataset_, split, batch_index, shape_.first_sample(), shape_.n_samples,
                          shape_.seq_len, tokens_.data(), targets_.data(), tokens_.size()),
        split == DST_SPLIT_TRAIN ? "reading training batch " + std::to_string(batch_index)
                                 : "reading validation batch " + std::to_string(batch_index));
}

dst_batch_t Trainer::BatchView() const {
  dst_batch_t batch;
  dst_batch_default(&batch);
  batch.n_samples = shape_.n_samples;
  batch.seq_len = shape_.seq_len;
  batch.tokens = tokens_.data();
  batch.tokens_count = tokens_.size();
  batch.targets = targets_.data();
  batch.targets_count = targets_.size();
  return batch;
}

double Trainer::TrainStep(int64_t step) {
  FillBatch(DST_SPLIT_TRAIN, static_cast<uint64_t>(step));
  const dst_batch_t batch = BatchView();
  float loss = 0.0f;
  Check(dst_engine_train_batch(engine_, &batch, &loss),
        "training step " + std::to_string(step + 1));
  return loss;
}

double Trainer::Evaluate() {
  double sum = 0.0;
  for (int64_t i = 0; i < eval_batches_; ++i) {
    FillBatch(DST_SPLIT_VAL, static_cast<uint64_t>(i));
    const dst_batch_t batch = BatchView();
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
