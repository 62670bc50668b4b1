// A rank's place in its tensor-parallel group (the topology's tp group).
#pragma once

#include <cstdint>

#include "core/comm/communicator.h"
#include "core/comm/work_order.h"

namespace dst {

// comm is null when size is 1 (and when only declaring a slice's shapes).
struct TensorParallelGroup {
  Communicator *comm = nullptr;
  int64_t size = 1, rank = 0;
  // Sequence parallelism: outside the tensor-parallel regions the rank holds
  // 1/size of the token rows (sequence_parallel.h).
  bool sequence_parallel = false;
  // On a device: how the layers' kernels wait for the group's collectives
  // (the compute stream waits, the host goes on); null: wait on the host.
  WorkOrder *order = nullptr;
  // Whether activations between layers are split by rows.
  bool splits_rows() const { return sequence_parallel && size > 1; }
};

}  // namespace dst
