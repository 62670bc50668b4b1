// A sequential model's data as one safetensors file (the Hugging Face
// format: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the bytes) holding two tensors,
// `inputs` (F32 [samples, input_dim]) and `labels` (F32 [samples, outputs]
// for MSE, I32/I64 [samples] class ids for cross-entropy) — what
// `safetensors.numpy.save_file({"inputs": x, "labels": y}, path)` writes.
#pragma once

#include <string>

#include "npy.h"

namespace dstrain_cli {

struct InputLabelArrays {
  NpyArray inputs, labels;
};

// Reads `path`; a usage error (exit 2) names the file and the problem.
InputLabelArrays ReadSafetensorsPair(const std::string &path);

}  // namespace dstrain_cli
