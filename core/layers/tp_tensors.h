// Whole tensors from tensor-parallel slices and back: what get_param /
// get_grad / set_param speak (global names and shapes, whatever the tp size).
#pragma once

#include "core/common/status.h"
#include "core/layers/params.h"
#include "core/tensor_parallel/tp_group.h"

namespace dst {

// The global tensor of `decl` (this rank's slice `local`, decl.numel
// elements) into `global` (numel of decl.global_shape): collective over the
// tp group for a split tensor, a copy for a whole one.
Status GatherTensor(const TensorParallelGroup &tp, const ParamDecl &decl, const float *local,
                    float *global);
// This rank's slice of the global tensor (padding rows 0).
void SliceTensor(const ParamDecl &decl, const float *global, float *local);

}  // namespace dst
