// The swap file's checksum of a slot or a commit record: four CRC32C lanes
// over the bytes as interleaved little-endian 8-byte words (the tail
// zero-padded), mixed with the length into 64 bits. With SSE4.2 the four
// lanes run in parallel on the crc32 instruction (about three times the
// speed of the checkpoint files' Checksum64, which matters here: every piece
// is summed on every read and write); without it a table computes the same
// value, so a file written on one CPU reads on another.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dst {

uint64_t SlotChecksum(const void *data, size_t bytes);
// The table path, whatever the CPU (tests compare the two).
uint64_t SlotChecksumPortable(const void *data, size_t bytes);

}  // namespace dst
