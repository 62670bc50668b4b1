// A rank's place in its tensor-parallel group (the topology's tp group).
#pragma once

#include <cstdint>

#include "core/comm/communicator.h"

namespace dst {

// comm is null when size is 1 (and when only declaring a slice's shapes).
struct TensorParallelGroup {
  Communicator *comm = nullptr;
  int64_t size = 1, rank = 0;
  // Sequence parallelism: outside the tensor-parallel regions the rank holds
  // 1/size of the token rows (sequence_parallel.h).
  bool sequence_parallel = false;
  // Whether activations between layers are split by rows.
  bool splits_rows() const { return sequence_parallel && size > 1; }
};

}  // namespace dst
