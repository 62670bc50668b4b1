// The 64-bit checksum recorded for every checkpoint file: not cryptographic,
// it catches truncation, bit rot and stray writes. The byte stream is read
// as little-endian 8-byte words (the last one zero-padded) dealt round-robin
// to four independent multiply-rotate lanes, so hashing runs at memory speed;
// the lanes and the length are then mixed. Streaming: Update may be called
// with pieces of any size and gives the same result as one call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dst {

class Checksum64 {
 public:
  void Update(const void *data, size_t n);
  // 16 lowercase hex digits of the digest of everything so far.
  std::string Hex() const;
  uint64_t Digest() const;  // the same digest as a number
  uint64_t bytes() const { return bytes_; }

 private:
  void Word(uint64_t w);
  std::array<uint64_t, 4> lanes_ = {0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL,
                                    0x165667b19e3779f9ULL, 0x27d4eb2f165667c5ULL};
  uint64_t words_ = 0;  // words dealt so far
  uint64_t bytes_ = 0;
  unsigned char pending_[8] = {};
  size_t pending_size_ = 0;
};

}  // namespace dst
