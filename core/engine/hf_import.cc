// A Hugging Face model directory's weights as a run's initial weights
// (CheckpointCoordinator::LoadHfWeights). Each tensor of the model is found
// by its family's Hugging Face name (HfTensorOf, with the base model's
// spellings), checked for shape and dtype, and only the tensors this rank
// holds are read: converted to fp32, GPT-2's Conv1D weights transposed to
// [out, in], a tensor-parallel rank's slice cut, then written as the
// parameter (DataParallelism::WriteParam: the ZeRO shard, the master weights,
// an NVMe store).
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "core/engine/checkpoint_coordinator.h"
#include "core/layers/tp_tensors.h"
#include "core/model/hf_weights.h"

namespace dst {

Status CheckpointCoordinator::LoadHfWeights(const std::string &dir) {
  ++ops_;
  const std::string what = "loading the Hugging Face weights in " + dir;
  Result<HfWeights> weights = HfWeights::Open(dir, *view_.spec, *view_.whole_decls);
  DST_RETURN_IF_ERROR(AgreeOnValidation(weights.status(), "hf_weights", what, what));
  const std::vector<ParamDecl> &decls = *view_.decls;
  std::vector<float> whole, slice;
  for (size_t id = 0; id < decls.size(); ++id) {
    const ParamDecl &d = decls[id];
    DST_RETURN_IF_ERROR(weights->ReadWhole(d.name, &whole).context(what));
    const float *values = whole.data();
    if (d.split.sliced()) {  // this tp rank's slice (padding rows at 0)
      slice.resize(size_t(d.numel));
      SliceTensor(d, whole.data(), slice.data());
      values = slice.data();
    }
    DST_RETURN_IF_ERROR(view_.dp->WriteParam(int(id), values).context(what));
  }
  return Status::Ok();
}

}  // namespace dst
