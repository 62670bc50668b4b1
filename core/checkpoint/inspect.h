// Reading a checkpoint without an engine: what `dstrain ckpt inspect` prints
// and what `dstrain ckpt export` writes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/common/status.h"

namespace dst {

// A description of DIR/TAG (tag empty: DIR/latest): the metadata (step,
// topology, precision, optimizer, LR schedule, loss scaler, RNG, client
// state), every file with its size and whether it passes its checksum, the
// tensors of the consolidated weights, and the optimizer shards. A file that
// fails verification is reported in the description ("valid": false), not as
// an error; an unreadable meta.json or a missing checkpoint is an error.
Result<nlohmann::json> InspectCheckpoint(const std::string &dir, const std::string &tag);

// Writes the checkpoint's consolidated fp32 weights (verified first) to
// `out_path` as safetensors, atomically (a temporary file renamed into place).
Status ExportCheckpointWeights(const std::string &dir, const std::string &tag,
                               const std::string &out_path);

}  // namespace dst
