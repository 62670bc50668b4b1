// A dstrain checkpoint written as a Hugging Face model directory (what
// `dstrain ckpt export DIR --format hf` writes): config.json,
// generation_config.json and the weights as model.safetensors, or shards
// with model.safetensors.index.json beyond the shard size, in the family's
// Hugging Face names and layouts (GPT-2's Conv1D weights transposed back to
// [in, out]; a tied LM head not written twice), so that transformers'
// from_pretrained loads it. Read from the checkpoint's consolidated weights,
// so a checkpoint of any layout exports the same files.
#pragma once

#include <cstdint>
#include <string>

#include "core/common/status.h"

namespace dst {

struct HfExportOptions {
  std::string dtype = "fp32";                 // "fp32", "bf16" or "fp16" (round to nearest even)
  int64_t max_shard_bytes = 5'000'000'000;   // transformers' default "5GB"
};

// Writes DIR/TAG (tag empty: DIR/latest, its files verified first) into
// `out_dir`, which must not exist or be empty; the files appear together (a
// sibling staging directory renamed into place). A sequential model has no
// Hugging Face form (kNotSupported); an fp16 export of a value beyond fp16's
// range is refused naming the tensor (kInvalidArgument).
Status ExportHfCheckpoint(const std::string &dir, const std::string &tag,
                          const std::string &out_dir, const HfExportOptions &options);

// "5GB", "500MB", "2GiB", "1000000" (bytes) as transformers' max_shard_size
// reads them (GB = 10^9, GiB = 2^30); kInvalidArgument otherwise.
Result<int64_t> ParseShardSize(const std::string &text);

}  // namespace dst
