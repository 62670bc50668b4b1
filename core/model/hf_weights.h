// A Hugging Face model directory's weights matched to a model's tensors by
// its family's names and layouts (core/model/family.h: HfTensorOf, the base
// model's unprefixed spellings, the ignorable buffers): every tensor of the
// whole model found with the shape it must have (GPT-2's Conv1D [in, out]),
// the directory's tensors all used or ignorable, and each read whole on
// demand in fp32 and dstrain's layout. A training run's initial weights
// (CheckpointCoordinator::LoadHfWeights, each rank reading only its
// tensors) and generation's weights read through it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/checkpoint/hf_checkpoint.h"
#include "core/common/status.h"
#include "core/layers/params.h"
#include "core/model/model_spec.h"

namespace dst {

class HfWeights {
 public:
  // Opens DIR's weights (HfCheckpoint::Open) and matches them to `whole`,
  // the whole model's declarations. Named errors: a tensor's shape (both
  // shapes), its dtype (F32, F16, BF16 are read), the missing and unexpected
  // tensors listed.
  static Result<HfWeights> Open(const std::string &dir, const ModelSpec &spec,
                                const std::vector<ParamDecl> &whole);
  // The model tensor `name` whole, in fp32 and dstrain's layout ([out, in]).
  Status ReadWhole(const std::string &name, std::vector<float> *out) const;
  const std::string &dir() const { return ckpt_.dir(); }

  // A model tensor's source in the checkpoint.
  struct Source {
    std::string file_name;  // its name in the checkpoint
    HfCheckpoint::Tensor tensor;
    bool transposed = false;
  };

 private:
  explicit HfWeights(HfCheckpoint ckpt) : ckpt_(std::move(ckpt)) {}
  HfCheckpoint ckpt_;
  std::map<std::string, Source> sources_;  // by model tensor name
};

}  // namespace dst
