#include "core/layers/tp_tensors.h"

#include <algorithm>
#include <vector>

namespace dst {

Status GatherTensor(const TensorParallelGroup &tp, const ParamDecl &decl, const float *local,
                    float *global) {
  if (!decl.split.split()) {
    std::copy(local, local + decl.numel, global);
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
      global[part.GlobalElement(i)] = all[size_t(p * decl.numel + i)];
  }
  return Status::Ok();
}

void SliceTensor(const ParamDecl &decl, const float *global, float *local) {
  for (int64_t i = 0; i < decl.numel; ++i) local[i] = global[decl.GlobalElement(i)];
}

}  // namespace dst
