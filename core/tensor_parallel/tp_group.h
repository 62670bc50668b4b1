// A rank's place in its tensor-parallel group (the topology's tp group).
#pragma once

#include <cstdint>

#include "core/comm/communicator.h"

namespace dst {

// comm is null when size is 1 (and when only declaring a slice's shapes).
struct TensorParallelGroup {
  Communicator *comm = nullptr;
  int64_t size = 1, rank = 0;
};

}  // namespace dst
