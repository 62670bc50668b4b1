// The caller's batch copied into device memory (dstrain.device "cuda"): the
// layers' kernels read the tokens, targets, inputs and labels where they
// compute. The buffers grow to the largest batch seen and are reused, so a
// steady run allocates nothing per step. The host batch was checked
// (batch_check.h) before it is staged.
#pragma once

#include <cstdint>

#include "core/engine/batch.h"
#include "core/runtime/memory.h"

namespace dst {

class DeviceBatch {
 public:
  // `memory` and `tracker` outlive the object; the copies are charged to
  // activations.
  DeviceBatch(MemoryResource *memory, MemoryTracker *tracker)
      : memory_(memory), tracker_(tracker) {}

  // `batch`'s arrays uploaded; the view has `batch`'s sizes over the copies
  // (valid until the next Stage).
  BatchView Stage(const BatchView &batch);

 private:
  template <typename T>
  const T *Upload(const T *host, size_t count, Buffer<T> *copy);

  MemoryResource *memory_;
  MemoryTracker *tracker_;
  Buffer<int32_t> tokens_, targets_;
  Buffer<float> inputs_, labels_;
};

}  // namespace dst
