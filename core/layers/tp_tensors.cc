#include "core/layers/tp_tensors.h"

#include <algorithm>
#include <vector>

namespace dst {

Status GatherTensor(const TensorParallelGroup &tp, const ParamDecl &decl, const float *local,
                    float *global) {
  if (!decl.split.sliced()) {
    std::copy(local, local + decl.numel, global);
    return Status::Ok();
  }
  if (!decl.split.split()) {  // whole but padded: the rows of the global tensor
    for (int64_t i = 0; i < decl.numel; ++i)
      if (const int64_t g = decl.GlobalElement(i); g >= 0) global[g] = local[i];
    return Status::Ok();
  }
  // [tp][numel]: every rank's slice, then each element to its global place.
  std::vector<float> all(size_t(decl.numel * tp.size));
  std::copy(local, local + decl.numel, all.begin() + decl.numel * tp.rank);
  DST_RETURN_IF_ERROR(tp.comm->AllGather(all.data(), decl.numel)->Wait());
  ParamDecl part = decl;
  for (int64_t p = 0; p < tp.size; ++p) {
    part.split.index = p;
    for (int64_t i = 0; i < decl.numel; ++i)
      if (const int64_t g = part.GlobalElement(i); g >= 0) global[g] = all[size_t(p * decl.numel + i)];
  }
  return Status::Ok();
}

void SliceTensor(const ParamDecl &decl, const float *global, float *local) {
  for (int64_t i = 0; i < decl.numel; ++i) {
    const int64_t g = decl.GlobalElement(i);
    local[i] = g >= 0 ? global[g] : 0.0f;  // padding rows hold 0
  }
}

}  // namespace dst
