// What ZeRO's two halves share: gradient synchronisation (grad_sync.h) and
// the sharded optimizer (sharded_optimizer.h) both see the group, the flat
// layout over it, the partition plan, the range of the flat buffer this
// rank's optimizer state covers, and the tensors kept in fp32 (values and
// gradients whole on every rank). DataParallel owns everything the pointers
// name and outlives both halves.
#pragma once

#include <cstdint>

#include "core/comm/communicator.h"
#include "core/kernels/step_kernels.h"
#include "core/model/model.h"
#include "core/runtime/memory.h"
#include "core/zero/fp32_params.h"
#include "core/zero/param_partition.h"
#include "core/zero/partition_plan.h"
#include "core/zero/shard_layout.h"
#include "core/zero/storage.h"

namespace dst {

struct ZeroShards {
  int stage = 0;
  StorageType storage = StorageType::kFp32;
  Communicator *dp = nullptr;
  Model<float> *model = nullptr;
  MemoryTracker *tracker = nullptr;
  ShardLayout layout{0, 1};
  ShardInfo state_range;  // stage 0: the whole padded buffer; 1-3: this rank's shard
  StepPlacement placement;
  const PartitionPlan *plan = nullptr;
  Communicator *local = nullptr;  // a group of one: 16-bit working copies at stages 0-2
  Fp32Params *fp32 = nullptr;     // 16 bits with override_modules
  // What each rank's gradients were multiplied by before the reduction
  // (prescale_gradients: 1 / dp; else 1 / gradient_predivide_factor).
  double pre_scale = 1;

  bool wide() const { return storage != StorageType::kFp32; }
  ShardInfo my_shard() const { return layout.Shard(dp->rank()); }
  const ParamDecl &decl(int id) const { return model->params().decls()[size_t(id)]; }
  // The part of tensor `id` the state range holds: [offset, offset + size)
  // in flat offsets (size 0 when it holds none).
  ShardInfo StatePartOf(int id) const {
    const ParamDecl &d = decl(id);
    const int64_t begin = d.offset > state_range.offset ? d.offset : state_range.offset;
    const int64_t range_end = state_range.offset + state_range.size, end = d.offset + d.numel;
    const int64_t stop = end < range_end ? end : range_end;
    return {begin, stop > begin ? stop - begin : 0};
  }
};

}  // namespace dst
