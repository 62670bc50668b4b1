#include "core/offload/slot_checksum.h"

#include <array>

#include "core/offload/slot_checksum_lanes.h"

namespace dst {

// slot_checksum_sse42.cc: the lanes on the crc32 instruction.
uint64_t SlotChecksumSse42(const void *data, size_t bytes);

namespace {

constexpr uint32_t kPoly = 0x82f63b78;  // CRC32C (Castagnoli), reflected

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

// The crc32 instruction's step on one 8-byte word, in software.
inline uint32_t Crc64Portable(uint32_t crc, uint64_t word) {
  for (int b = 0; b < 8; ++b) crc = (crc >> 8) ^ kTable[(crc ^ uint32_t(word >> (8 * b))) & 0xff];
  return crc;
}

bool HasSse42() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2") != 0;
#else
  return false;
#endif
}

}  // namespace

uint64_t SlotChecksumPortable(const void *data, size_t bytes) {
  return slot_checksum_internal::Lanes(static_cast<const unsigned char *>(data), bytes,
                                       Crc64Portable);
}

uint64_t SlotChecksum(const void *data, size_t bytes) {
  static const bool sse42 = HasSse42();
  return sse42 ? SlotChecksumSse42(data, bytes) : SlotChecksumPortable(data, bytes);
}

}  // namespace dst
