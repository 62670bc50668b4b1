// SlotChecksum's lanes on the crc32 instruction: this file alone is
// compiled for SSE4.2 (the pragma), and called only where CPUID has it.
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#pragma GCC target("sse4.2")
#endif

#include "core/offload/slot_checksum_lanes.h"

namespace dst {

uint64_t SlotChecksumSse42(const void *data, size_t bytes) {
#if defined(__x86_64__)
  return slot_checksum_internal::Lanes(
      static_cast<const unsigned char *>(data), bytes,
      [](uint32_t crc, uint64_t word) { return uint32_t(_mm_crc32_u64(crc, word)); });
#else
  (void)data;
  (void)bytes;
  return 0;  // never called: SlotChecksum takes this path on x86-64 only
#endif
}

}  // namespace dst
