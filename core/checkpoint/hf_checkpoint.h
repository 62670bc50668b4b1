// A Hugging Face model directory's weights: `model.safetensors`, or the
// shards `model.safetensors.index.json` names (its "weight_map": tensor name
// -> shard file), each opened with SafetensorsReader so that a rank reads
// only the tensors it holds. The tensors keep the file's dtype and layout;
// the names and layouts a model family gives them are the model's business.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.h"
#include "core/common/status.h"

namespace dst {

class HfCheckpoint {
 public:
  // A tensor of the checkpoint: its file and its header entry.
  struct Tensor {
    const SafetensorsReader *file = nullptr;
    const SafetensorsEntry *entry = nullptr;
  };

  // Opens DIR's weights and validates every header (and the index: each
  // shard exists, holds the tensors the index gives it). Named errors: DIR
  // missing or not a directory (kIo), no safetensors weights (kCheckpoint; a
  // directory with PyTorch's pytorch_model.bin only is kNotSupported, with
  // the conversion command), a malformed index or shard (kCheckpoint naming
  // the file and the tensor).
  static Result<HfCheckpoint> Open(const std::string &dir);

  const std::string &dir() const { return dir_; }
  // Every tensor name, sorted.
  std::vector<std::string> Names() const;
  // The tensor `name`, or {null, null}.
  Tensor Find(const std::string &name) const;
  // out[0, bytes) = the tensor's bytes as stored (its dtype, row-major).
  Status ReadAll(const Tensor &t, void *out) const;

 private:
  std::string dir_;
  std::vector<SafetensorsReader> files_;
  std::map<std::string, Tensor> tensors_;
};

// "model.safetensors" and its sharded form's index, as transformers names them.
inline constexpr char kHfWeightsFile[] = "model.safetensors";
inline constexpr char kHfWeightsIndex[] = "model.safetensors.index.json";

}  // namespace dst
