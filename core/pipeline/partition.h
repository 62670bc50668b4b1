// Stage partitioning: how a model's layers are cut into the contiguous runs
// the pipeline's (virtual) stages hold. Every rank computes the same
// partition from the model spec and the config, so nothing is exchanged.
//
//   uniform      layer counts as equal as they can be
//   parameters   balanced parameter counts (DeepSpeed's default)
//   type:REGEX   balanced counts of the layers whose kind matches REGEX
//                (case-insensitive; e.g. "type:transformer" for GPT blocks)
//   cost         balanced forward + backward FLOPs per micro-batch, the
//                embedding and the loss counted (neither DeepSpeed nor Megatron
//                weighs them)
//
// "Balanced" minimises the heaviest part (an exact search over the cut
// points); every part holds at least one layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/status.h"

namespace dst {

// What the partitioner knows of one layer of the whole model.
struct LayerCost {
  std::string kind;        // "embedding", "transformer", "head", "linear", "relu", ...
  int64_t parameters = 0;  // declared by the layer (a tied tensor counts where declared)
  double flops = 0;        // forward + backward of one micro-batch
};

// Boundaries b[0] = 0 < b[1] < ... < b[parts] = layers.size(): part k holds
// layers [b[k], b[k + 1]). Errors name the method, or the numbers when there
// are fewer layers than parts.
Result<std::vector<size_t>> PartitionLayers(const std::vector<LayerCost> &layers, int64_t parts,
                                            const std::string &method);

// The boundaries that minimise the heaviest part's weight (sum of
// `weights` over its layers), every part non-empty. Ties go to the earliest
// cuts. parts <= weights.size().
std::vector<size_t> BalancedBoundaries(const std::vector<double> &weights, int64_t parts);

}  // namespace dst
