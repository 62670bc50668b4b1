// Where `dstrain train` gets its batches: a rank's samples of global batch i
// of a split, as a dst_batch_t the engine reads.
//
//   TextBatches          byte-level text (GPT models): the default corpus or --data FILE
//   ArrayBatches         --data INPUTS.npy --labels LABELS.npy, or --data
//                        DATA.safetensors (tensors "inputs" and "labels";
//                        sequential models): rows of the arrays, the last
//                        --val-fraction held out
//   SyntheticRegression  --data synthetic (sequential models): inputs drawn from
//                        N(0, 1), labels computed by a fixed random teacher
//                        network with the model's own shapes, so the loss can
//                        fall towards a known floor (0 for MSE)
//
// Sample j of batch i depends only on (seed, split, i, j): a data-parallel
// rank r taking samples [r n, (r + 1) n) sees exactly what one process would.
#pragma once

#include <dstrain/dstrain.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "handles.h"
#include "npy.h"
#include "trainer.h"

namespace dstrain_cli {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills this rank's samples of global batch `index` of `split`; the view
  // stays valid until the next Fill.
  virtual dst_batch_t Fill(dst_split_t split, uint64_t index) = 0;
  // "byte-level text from PATH (N train / M val tokens)", ...
  virtual std::string Describe() const = 0;
  // Tokens (GPT) or samples one rank's batch holds.
  virtual size_t units_per_batch() const = 0;
  virtual const char *unit() const = 0;  // "tokens" or "samples"
};

class TextBatches final : public BatchSource {
 public:
  TextBatches(Dataset dataset, BatchShape shape);
  dst_batch_t Fill(dst_split_t split, uint64_t index) override;
  std::string Describe() const override;
  size_t units_per_batch() const override { return shape_.num_elements(); }
  const char *unit() const override { return "tokens"; }

 private:
  Dataset dataset_;
  BatchShape shape_;
  std::vector<int32_t> tokens_, targets_;
};

class SyntheticRegression final : public BatchSource {
 public:
  // `model`: the sequential model spec (its layers define the teacher);
  // `n_samples`: this rank's samples per batch; `first_sample`: its first.
  SyntheticRegression(const nlohmann::json &model, size_t n_samples, uint64_t first_sample,
                      uint64_t seed);
  dst_batch_t Fill(dst_split_t split, uint64_t index) override;
  std::string Describe() const override;
  size_t units_per_batch() const override { return n_samples_; }
  const char *unit() const override { return "samples"; }

 private:
  struct TeacherLayer {
    std::string kind;         // linear | relu | gelu | layernorm
    int64_t in = 0, out = 0;  // linear
    std::vector<float> w, b;  // linear: [out, in], [out]
  };
  // The teacher's output for one input row.
  std::vector<float> Teach(const float *x) const;

  std::vector<TeacherLayer> layers_;
  int64_t input_dim_ = 0, output_dim_ = 0;
  bool classes_ = false;  // cross-entropy: labels are the argmax class
  size_t n_samples_;
  uint64_t first_sample_, seed_;
  std::vector<float> inputs_, labels_;
  std::vector<int32_t> targets_;
};

class ArrayBatches final : public BatchSource {
 public:
  // `inputs` [N, input_dim] float32; `labels` [N, outputs] float32 (MSE) or
  // [N] class ids (cross-entropy). Sample j of batch i of a split is row
  // (i x global batch + first_sample + j) mod the split's rows.
  ArrayBatches(NpyArray inputs, NpyArray labels, std::string description, bool classes,
               size_t n_samples, uint64_t first_sample, int64_t dp_size, double val_fraction);
  dst_batch_t Fill(dst_split_t split, uint64_t index) override;
  std::string Describe() const override { return description_; }
  size_t units_per_batch() const override { return n_samples_; }
  const char *unit() const override { return "samples"; }

 private:
  NpyArray inputs_, labels_;
  std::string description_;
  bool classes_;
  size_t n_samples_;
  uint64_t first_sample_;
  int64_t dp_size_, train_rows_;
  std::vector<float> x_, y_;
  std::vector<int32_t> t_;
};

// The batch source `dstrain train` uses for the model: text for a GPT; for a
// sequential model --data synthetic, a .npy pair (--data INPUTS.npy --labels
// LABELS.npy) or a safetensors file; other formats are a usage error.
std::unique_ptr<BatchSource> OpenBatchSource(const dst_engine_info_t &info,
                                             const std::string &model_path,
                                             const std::string &data_path,
                                             const std::string &labels_path, double val_fraction,
                                             const BatchShape &shape, uint64_t seed);

}  // namespace dstrain_cli
