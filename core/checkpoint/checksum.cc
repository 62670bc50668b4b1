#include "core/checkpoint/checksum.h"

#include <cstdio>
#include <cstring>

namespace dst {

namespace {
constexpr uint64_t kMul = 0xff51afd7ed558ccdULL;

inline uint64_t Mix(uint64_t lane, uint64_t w) {
  lane = (lane ^ w) * kMul;
  return (lane << 29) | (lane >> 35);
}
}  // namespace

void Checksum64::Word(uint64_t w) {
  lanes_[words_ & 3] = Mix(lanes_[words_ & 3], w);
  ++words_;
}

void Checksum64::Update(const void *data, size_t n) {
  const auto *p = static_cast<const unsigned char *>(data);
  bytes_ += n;
  while (pending_size_ > 0 && pending_size_ < 8 && n > 0) {  // finish a partial word first
    pending_[pending_size_++] = *p++;
    --n;
    if (pending_size_ == 8) {
      uint64_t w;
      std::memcpy(&w, pending_, 8);
      Word(w);
      pending_size_ = 0;
    }
  }
  // Whole words; four at a time once the lanes are aligned (independent chains).
  while (n >= 8 && (words_ & 3) != 0) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    Word(w);
    p += 8;
    n -= 8;
  }
  uint64_t a = lanes_[0], b = lanes_[1], c = lanes_[2], d = lanes_[3];
  while (n >= 32) {
    uint64_t w[4];
    std::memcpy(w, p, 32);
    a = Mix(a, w[0]);
    b = Mix(b, w[1]);
    c = Mix(c, w[2]);
    d = Mix(d, w[3]);
    p += 32;
    n -= 32;
    words_ += 4;
  }
  lanes_ = {a, b, c, d};
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    Word(w);
    p += 8;
    n -= 8;
  }
  if (n > 0) {  // here no partial word is pending: the first loop completed it
    std::memcpy(pending_, p, n);
    pending_size_ = n;
  }
}

std::string Checksum64::Hex() const {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(Digest()));
  return hex;
}

uint64_t Checksum64::Digest() const {
  std::array<uint64_t, 4> lanes = lanes_;
  uint64_t words = words_;
  if (pending_size_ > 0) {  // the zero-padded last word
    unsigned char last[8] = {};
    std::memcpy(last, pending_, pending_size_);
    uint64_t w;
    std::memcpy(&w, last, 8);
    lanes[words & 3] = Mix(lanes[words & 3], w);
  }
  uint64_t h = bytes_;
  for (uint64_t lane : lanes) h = Mix(h, lane);
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

}  // namespace dst
