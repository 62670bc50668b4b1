// A weight two pipeline stages hold copies of: GPT's token embedding (wte)
// on the first stage and the tied LM head on the last. The copies start
// equal (same name, same seeded values); after each step's reductions their
// gradients are summed across the two stages, so both apply the same update
// and stay equal; the gradient norm counts the tensor once (the last stage
// leaves its copy out).
#pragma once

#include <cstdint>

#include "core/comm/communicator.h"
#include "core/common/status.h"
#include "core/runtime/memory.h"
#include "core/zero/parallelism.h"

namespace dst {

class TiedWeights {
 public:
  // `local_id`: the tensor's id in this stage's model (-1: this stage holds
  // no copy: nothing to do). `peer`: the pp rank holding the other copy.
  // `memory`: where the model's gradients live (the exchange buffers go
  // there too; on a device the two copies travel over the group's device
  // connections, as one exchange: a send and a receive that cannot wait for
  // each other).
  TiedWeights(Communicator *pp, int local_id, int64_t numel, int64_t peer, MemoryTracker *tracker,
              MemoryResource *memory = nullptr);

  bool holds_copy() const { return id_ >= 0; }
  // The tensor to leave out of this stage's gradient norm (-1: none).
  int excluded_from_norm() const { return pp_->rank() > peer_ ? id_ : -1; }
  // After FinishReduction: both copies' gradients become their sum.
  Status SumGradients(DataParallelism &dp);

 private:
  Communicator *pp_;
  int id_;
  int64_t numel_, peer_;
  Buffer<float> mine_, theirs_;  // in `memory`
};

}  // namespace dst
