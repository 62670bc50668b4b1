// The model spec JSON: which model to build. Two kinds:
//   {"type": "gpt", "vocab_size": 256, "n_ctx": 256, "n_layer": 6, "n_head": 6,
//    "d_model": 384, "seed": 1337}
//   {"type": "sequential", "input_dim": 16, "loss": "mse" | "cross_entropy",
//    "layers": [{"type": "linear", "out_features": 32, "bias": true}, {"type": "relu"},
//               {"type": "gelu"}, {"type": "layernorm"}, ...], "seed": 1}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/status.h"
#include "core/model/gpt_layers.h"

namespace dst {

struct SequentialLayerSpec {
  enum class Kind { kLinear, kRelu, kGelu, kLayerNorm };
  Kind kind = Kind::kLinear;
  int64_t out_features = 0;  // linear
  bool bias = true;          // linear
};

struct ModelSpec {
  enum class Type { kGpt, kSequential };
  enum class Loss { kCrossEntropy, kMse };
  Type type = Type::kGpt;
  Loss loss = Loss::kCrossEntropy;
  uint64_t seed = 1337;
  GptDims gpt;                              // type gpt
  int64_t input_dim = 0;                    // type sequential
  std::vector<SequentialLayerSpec> layers;  // type sequential
  std::string canonical_json;               // normalised spec, stored in checkpoints

  // Features per sample produced by the last sequential layer.
  int64_t SequentialOutputDim() const;
};

// Parses and validates; errors name the JSON path, expected and found.
Result<ModelSpec> ParseModelSpec(std::string_view json_text);

// The first field in which `saved` and `current` compute differently (the
// seed only sets the initial weights, so it is not compared), as
// "n_head: 4 in the checkpoint, 2 here"; "" when they compute the same.
// Fields such as n_head change the computation without changing any
// tensor's shape, so a checkpoint's tensors alone cannot show them.
std::string FirstComputationDifference(const ModelSpec &saved, const ModelSpec &current);

}  // namespace dst
