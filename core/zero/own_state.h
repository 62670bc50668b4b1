// A rank's own state: buffers that persist across steps, that no other rank
// holds and that no other layout could rebuild from a checkpoint's flat
// state — error-feedback residuals of compressed communication, 1-bit
// Adam's worker and server errors, under update compression the rank's own
// optimizer moments, 0/1 Adam's accumulated local steps. Checkpoints save each rank's under its
// name; a load into the same layout restores them bit for bit, any other load starts them afresh
// (zero; update compression's moments as the flat state has them).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/runtime/memory.h"

namespace dst {

struct OwnStateBuffer {
  std::string name;  // "grad_compression.residual", "onebit.worker_error", ...
  float *data;       // host memory, [numel]
  int64_t numel;
  // An optional buffer is this rank's own only at times (0/1 Adam's weights
  // and momentum past its variance freeze): saved while `save` is true,
  // restored when a checkpoint has it; otherwise the flat state's copy is
  // every rank's.
  bool optional = false;
  bool save = true;
};
// A number the rank keeps with its buffers (0/1 Adam's learning rates summed
// since the last synchronisation).
struct OwnScalar {
  std::string name;
  double *value;
};
struct OwnState {
  std::vector<OwnStateBuffer> buffers;
  std::vector<OwnScalar> scalars;
  bool empty() const { return buffers.empty() && scalars.empty(); }
};

// `buffer` as `name` in `out`, unless it holds nothing (a feature not in use).
inline void AppendOwnBuffer(std::string name, Buffer<float> &buffer, OwnState *out) {
  if (buffer.size() > 0)
    out->buffers.push_back({std::move(name), buffer.data(), int64_t(buffer.size())});
}
inline void ZeroOwnBuffer(Buffer<float> &buffer) {
  std::fill_n(buffer.data(), buffer.size(), 0.0f);
}

}  // namespace dst
