#include "batch_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cli_error.h"
#include "default_job.h"
#include "format.h"
#include "safetensors_input.h"

namespace dstrain_cli {

// ---------------------------------------------------------------- text

TextBatches::TextBatches(Dataset dataset, BatchShape shape)
    : dataset_(std::move(dataset)),
      shape_(shape),
      tokens_(shape.num_elements()),
      targets_(shape.num_elements()) {}

dst_batch_t TextBatches::Fill(dst_split_t split, uint64_t index) {
  Check(dst_dataset_batch(dataset_.get(), split, index, shape_.first_sample(), shape_.n_samples,
                          shape_.seq_len, tokens_.data(), targets_.data(), tokens_.size()),
        split == DST_SPLIT_TRAIN ? "reading training batch " + std::to_string(index)
                                 : "reading validation batch " + std::to_string(index));
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

std::string TextBatches::Describe() const {
  const char *path = nullptr;
  Check(dst_dataset_path(dataset_.get(), &path), "reading the dataset path");
  size_t train = 0, val = 0;
  Check(dst_dataset_num_tokens(dataset_.get(), DST_SPLIT_TRAIN, &train), "reading the dataset");
  Check(dst_dataset_num_tokens(dataset_.get(), DST_SPLIT_VAL, &val), "reading the dataset");
  return std::string(path) + " (" + FormatCount(double(train)) + " train / " +
         FormatCount(double(val)) + " val tokens)";
}

// ---------------------------------------------------------------- synthetic

namespace {

// A sequential model's batch: inputs, and float labels (MSE) or class ids.
dst_batch_t SequentialBatch(size_t n_samples, const std::vector<float> &inputs,
                            const std::vector<float> &labels, const std::vector<int32_t> &targets,
                            bool classes) {
  dst_batch_t batch;
  dst_batch_default(&batch);
  batch.n_samples = n_samples;
  batch.inputs = inputs.data();
  batch.inputs_count = inputs.size();
  if (classes) {
    batch.targets = targets.data();
    batch.targets_count = targets.size();
  } else {
    batch.labels = labels.data();
    batch.labels_count = labels.size();
  }
  return batch;
}

// SplitMix64: a counter-based stream, so a value depends only on its key.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A standard normal value for `key` (Box-Muller on two hashed uniforms).
float Normal(uint64_t key) {
  const double u1 = (double(Mix(key) >> 11) + 1.0) / 9007199254740993.0;  // (0, 1]
  const double u2 = double(Mix(key ^ 0x5bd1e995u) >> 11) / 9007199254740992.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

uint64_t Key(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return Mix(Mix(Mix(Mix(a) ^ b) ^ c) ^ d);
}

}  // namespace

SyntheticRegression::SyntheticRegression(const nlohmann::json &model, size_t n_samples,
                                         uint64_t first_sample, uint64_t seed)
    : n_samples_(n_samples), first_sample_(first_sample), seed_(seed) {
  input_dim_ = model.value("input_dim", int64_t(0));
  classes_ = model.value("loss", std::string("mse")) == "cross_entropy";
  int64_t width = input_dim_;
  uint64_t layer_index = 0;
  for (const auto &spec : model.value("layers", nlohmann::json::array())) {
    TeacherLayer layer;
    layer.kind = spec.value("type", std::string());
    if (layer.kind == "linear") {
      layer.in = width;
      layer.out = spec.value("out_features", int64_t(1));
      const float scale = 1.0f / std::sqrt(float(std::max<int64_t>(layer.in, 1)));
      for (int64_t i = 0; i < layer.in * layer.out; ++i)
        layer.w.push_back(scale * Normal(Key(seed_ ^ 0x7eac4e7, layer_index, 0, uint64_t(i))));
      for (int64_t i = 0; i < layer.out; ++i)
        layer.b.push_back(0.1f * Normal(Key(seed_ ^ 0x7eac4e7, layer_index, 1, uint64_t(i))));
      width = layer.out;
    }
    layers_.push_back(std::move(layer));
    ++layer_index;
  }
  output_dim_ = width;
  inputs_.resize(n_samples_ * size_t(input_dim_));
  labels_.resize(classes_ ? 0 : n_samples_ * size_t(output_dim_));
  targets_.resize(classes_ ? n_samples_ : 0);
}

std::vector<float> SyntheticRegression::Teach(const float *x) const {
  std::vector<float> h(x, x + input_dim_);
  for (const TeacherLayer &layer : layers_) {
    if (layer.kind == "linear") {
      std::vector<float> y(size_t(layer.out));
      for (int64_t o = 0; o < layer.out; ++o) {
        double sum = layer.b[size_t(o)];
        for (int64_t i = 0; i < layer.in; ++i)
          sum += double(layer.w[size_t(o * layer.in + i)]) * double(h[size_t(i)]);
        y[size_t(o)] = float(sum);
      }
      h = std::move(y);
    } else if (layer.kind == "relu") {
      for (float &v : h) v = std::max(v, 0.0f);
    } else if (layer.kind == "gelu") {
      for (float &v : h)
        v = 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
    } else if (layer.kind == "layernorm") {
      double mean = 0, var = 0;
      for (float v : h) mean += v;
      mean /= double(h.size());
      for (float v : h) var += (v - mean) * (v - mean);
      const double rstd = 1.0 / std::sqrt(var / double(h.size()) + 1e-5);
      for (float &v : h) v = float((v - mean) * rstd);
    }
  }
  return h;
}

dst_batch_t SyntheticRegression::Fill(dst_split_t split, uint64_t index) {
  for (size_t j = 0; j < n_samples_; ++j) {
    const uint64_t sample = first_sample_ + j;
    float *x = inputs_.data() + j * size_t(input_dim_);
    for (int64_t f = 0; f < input_dim_; ++f)
      x[f] = Normal(Key(seed_, uint64_t(split), index, sample * uint64_t(input_dim_) + f));
    const std::vector<float> y = Teach(x);
    if (classes_)
      targets_[j] = int32_t(std::max_element(y.begin(), y.end()) - y.begin());
    else
      std::memcpy(labels_.data() + j * size_t(output_dim_), y.data(), y.size() * sizeof(float));
  }
  return SequentialBatch(n_samples_, inputs_, labels_, targets_, classes_);
}

std::string SyntheticRegression::Describe() const {
  return std::string("synthetic ") + (classes_ ? "classification" : "regression") + " (" +
         std::to_string(input_dim_) + " inputs, " + std::to_string(output_dim_) +
         (classes_ ? " classes" : " outputs") +
         " from a fixed random teacher with the model's shapes; the loss floor is " +
         (classes_ ? "below ln(classes)" : "0") + ")";
}

// ---------------------------------------------------------------- arrays

ArrayBatches::ArrayBatches(NpyArray inputs, NpyArray labels, std::string description, bool classes,
                           size_t n_samples, uint64_t first_sample, int64_t dp_size,
                           double val_fraction)
    : inputs_(std::move(inputs)),
      labels_(std::move(labels)),
      description_(std::move(description)),
      classes_(classes),
      n_samples_(n_samples),
      first_sample_(first_sample),
      dp_size_(dp_size) {
  const int64_t rows = inputs_.rows();
  const int64_t val =
      val_fraction > 0 ? std::max<int64_t>(1, int64_t(double(rows) * val_fraction)) : 0;
  train_rows_ = rows - val;
  if (train_rows_ < 1)
    UsageError("the arrays have " + std::to_string(rows) + " rows and --val-fraction " +
               std::to_string(val_fraction) + " leaves none to train on");
  x_.resize(n_samples_ * size_t(inputs_.row_size()));
  if (classes_)
    t_.resize(n_samples_);
  else
    y_.resize(n_samples_ * size_t(labels_.row_size()));
}

dst_batch_t ArrayBatches::Fill(dst_split_t split, uint64_t index) {
  const int64_t rows = inputs_.rows();
  const bool train = split == DST_SPLIT_TRAIN;
  const int64_t begin = train ? 0 : train_rows_;
  const int64_t count = train ? train_rows_ : std::max<int64_t>(rows - train_rows_, 1);
  const uint64_t global = uint64_t(n_samples_) * uint64_t(dp_size_);
  const int64_t in = inputs_.row_size(), out = labels_.row_size();
  for (size_t j = 0; j < n_samples_; ++j) {
    const int64_t row = (train || rows > train_rows_ ? begin : 0) +
                        int64_t((index * global + first_sample_ + j) % uint64_t(count));
    std::memcpy(x_.data() + j * size_t(in), inputs_.f32.data() + row * in, size_t(in) * 4);
    if (classes_)
      t_[j] = int32_t(labels_.ints[size_t(row)]);
    else
      std::memcpy(y_.data() + j * size_t(out), labels_.f32.data() + row * out, size_t(out) * 4);
  }
  return SequentialBatch(n_samples_, x_, y_, t_, classes_);
}

namespace {

// Checks the arrays against the model and builds their batch source.
// Inputs and labels (named `inputs_path` and `labels_path` in errors: two
// .npy files, or two tensors of one safetensors file) checked against the model.
std::unique_ptr<BatchSource> ArraysFor(const dst_engine_info_t &info, NpyArray x, NpyArray y,
                                       const std::string &inputs_path,
                                       const std::string &labels_path, double val_fraction,
                                       const BatchShape &shape) {
  const bool classes = info.loss_type == DST_LOSS_CROSS_ENTROPY;
  if (!x.is_float() || x.shape.size() != 2 || x.shape[1] != info.input_dim)
    UsageError("'" + inputs_path + "' must be float32 [samples, " + std::to_string(info.input_dim) +
               "] (the model's input_dim)");
  if (y.rows() != x.rows())
    UsageError("'" + labels_path + "' has " + std::to_string(y.rows()) + " rows but '" +
               inputs_path + "' has " + std::to_string(x.rows()) + ": one label row per sample");
  if (classes) {
    if (y.is_float() || y.shape.size() != 1)
      UsageError("'" + labels_path +
                 "' must hold int32/int64 class ids [samples] for the "
                 "cross-entropy loss");
    for (int64_t c : y.ints)
      if (c < 0 || c >= info.output_dim)
        UsageError("'" + labels_path + "' holds class " + std::to_string(c) + ", outside [0, " +
                   std::to_string(info.output_dim) + ")");
  } else if (!y.is_float() || y.shape.size() != 2 || y.shape[1] != info.output_dim) {
    UsageError("'" + labels_path + "' must be float32 [samples, " +
               std::to_string(info.output_dim) + "] (the model's outputs) for the MSE loss");
  }
  const std::string description =
      inputs_path + " / " + labels_path + " (" + std::to_string(x.rows()) + " samples)";
  return std::make_unique<ArrayBatches>(std::move(x), std::move(y), description, classes,
                                        shape.n_samples, shape.first_sample(), shape.dp_size,
                                        val_fraction);
}

std::unique_ptr<BatchSource> OpenNpyPair(const dst_engine_info_t &info,
                                         const std::string &inputs_path,
                                         const std::string &labels_path, double val_fraction,
                                         const BatchShape &shape) {
  if (labels_path.empty())
    UsageError("--data " + inputs_path + " needs --labels LABELS.npy (one row per sample)");
  return ArraysFor(info, ReadNpy(inputs_path), ReadNpy(labels_path), inputs_path, labels_path,
                   val_fraction, shape);
}

std::unique_ptr<BatchSource> OpenSafetensors(const dst_engine_info_t &info, const std::string &path,
                                             const std::string &labels_path, double val_fraction,
                                             const BatchShape &shape) {
  if (!labels_path.empty())
    UsageError("--labels is for a .npy pair; " + path +
               " holds the labels itself (tensor \"labels\")");
  InputLabelArrays arrays = ReadSafetensorsPair(path);
  return ArraysFor(info, std::move(arrays.inputs), std::move(arrays.labels),
                   path + " tensor \"inputs\"", path + " tensor \"labels\"", val_fraction, shape);
}

bool EndsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// ---------------------------------------------------------------- choice

std::unique_ptr<BatchSource> OpenBatchSource(const dst_engine_info_t &info,
                                             const std::string &model_path,
                                             const std::string &data_path,
                                             const std::string &labels_path, double val_fraction,
                                             const BatchShape &shape, uint64_t seed) {
  if (info.model_type == DST_MODEL_GPT) {
    if (!labels_path.empty())
      UsageError(
          "--labels is for sequential models; a GPT's targets are the next tokens of its "
          "text");
    if (data_path == "synthetic")
      UsageError(
          "--data synthetic is a regression task for sequential models; a GPT trains on "
          "text (omit --data for the default corpus, or pass a text file)");
    if (EndsWith(data_path, ".bin")) {  // token ids: llm.c / nanoGPT
      dst_dataset_t *dataset = nullptr;
      Check(dst_dataset_open_tokens(&dataset, data_path.c_str(), val_fraction, seed),
            "opening the token file '" + data_path + "'");
      Dataset owned(dataset);
      int64_t max_token = 0;
      Check(dst_dataset_max_token(dataset, &max_token), "reading the token file");
      if (max_token >= info.vocab_size)
        UsageError("the token file '" + data_path + "' holds token id " +
                   std::to_string(max_token) + " but the model's vocab_size is " +
                   std::to_string(info.vocab_size) + "; use a model with vocab_size >= " +
                   std::to_string(max_token + 1) + " (GPT-2's tokenizer: 50257)");
      return std::make_unique<TextBatches>(std::move(owned), shape);
    }
    if (info.vocab_size < 256)
      UsageError("byte-level text needs vocab_size >= 256, the model has " +
                 std::to_string(info.vocab_size));
    dst_dataset_t *dataset = nullptr;
    const char *path = data_path.empty() ? nullptr : data_path.c_str();
    Check(dst_dataset_open_text(&dataset, path, val_fraction, seed),
          data_path.empty() ? std::string("opening the default corpus")
                            : "opening the data file '" + data_path + "'");
    return std::make_unique<TextBatches>(Dataset(dataset), shape);
  }
  if (EndsWith(data_path, ".npy"))
    return OpenNpyPair(info, data_path, labels_path, val_fraction, shape);
  if (EndsWith(data_path, ".safetensors"))
    return OpenSafetensors(info, data_path, labels_path, val_fraction, shape);
  if (data_path != "synthetic")
    UsageError(
        "a sequential model trains on --data synthetic (a regression task with labels from "
        "a fixed random teacher network), on --data INPUTS.npy --labels LABELS.npy, or on "
        "--data DATA.safetensors (tensors \"inputs\" and \"labels\")" +
        std::string(data_path.empty() ? "" : " (got --data " + data_path + ")"));
  const char *text = nullptr;
  if (dst_config_file_read(model_path.c_str(), &text) != DST_OK || text == nullptr)
    UsageError("cannot read the model spec '" + model_path + "': " + dst_last_error());
  const nlohmann::json model = nlohmann::json::parse(text, nullptr, false);
  return std::make_unique<SyntheticRegression>(model, shape.n_samples, shape.first_sample(), seed);
}

}  // namespace dstrain_cli
