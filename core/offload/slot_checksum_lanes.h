// The lanes of SlotChecksum over any CRC32C step (internal: included by
// slot_checksum.cc and, compiled for SSE4.2, slot_checksum_sse42.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dst::slot_checksum_internal {

inline uint64_t Mix(const std::array<uint32_t, 4> &lanes, size_t bytes) {
  uint64_t h = uint64_t(bytes) * 0x9e3779b97f4a7c15ULL;
  for (uint32_t lane : lanes) {
    h ^= lane;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
  }
  return h;
}

// Words [0, n / 8) dealt round-robin to 4 lanes, then the zero-padded tail
// to the next lane in turn.
template <typename Step>
inline uint64_t Lanes(const unsigned char *p, size_t bytes, Step step) {
  std::array<uint32_t, 4> lanes = {~0u, ~0u, ~0u, ~0u};
  const size_t words = bytes / 8;
  size_t w = 0;
  for (; w + 4 <= words; w += 4) {
    uint64_t x[4];
    std::memcpy(x, p + 8 * w, 32);
    lanes[0] = step(lanes[0], x[0]);
    lanes[1] = step(lanes[1], x[1]);
    lanes[2] = step(lanes[2], x[2]);
    lanes[3] = step(lanes[3], x[3]);
  }
  for (; w < words; ++w) {
    uint64_t x;
    std::memcpy(&x, p + 8 * w, 8);
    lanes[w & 3] = step(lanes[w & 3], x);
  }
  if (const size_t tail = bytes - 8 * words; tail > 0) {
    uint64_t x = 0;
    std::memcpy(&x, p + 8 * words, tail);
    lanes[words & 3] = step(lanes[words & 3], x);
  }
  return Mix(lanes, bytes);
}

}  // namespace dst::slot_checksum_internal
