// A caller's batch as the engine receives it: borrowed buffers with their
// element counts, checked before any compute.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dst {

struct BatchView {
  size_t n_samples = 0;
  size_t seq_len = 0;
  const int32_t *tokens = nullptr;
  size_t tokens_count = 0;
  const int32_t *targets = nullptr;
  size_t targets_count = 0;
  const float *inputs = nullptr;
  size_t inputs_count = 0;
  const float *labels = nullptr;
  size_t labels_count = 0;
};

}  // namespace dst
