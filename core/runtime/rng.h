// Counter-based random numbers: every draw is a pure function of (seed,
// stream, index), so initialisation does not depend on order, sharding or
// thread count.
#pragma once

#include <cmath>
#include <cstdint>

namespace dst {

// SplitMix64 finaliser: a bijective 64-bit mix.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t HashKey(uint64_t seed, uint64_t stream, uint64_t index) {
  return Mix64(Mix64(Mix64(seed) ^ stream) ^ index);
}

// Uniform in (0, 1): 53 random bits, never exactly 0.
inline double UniformOpen(uint64_t bits) {
  return (double(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal for element `index` of `stream` (Box-Muller on two draws).
inline double StandardNormal(uint64_t seed, uint64_t stream, uint64_t index) {
  const double u1 = UniformOpen(HashKey(seed, stream, 2 * index));
  const double u2 = UniformOpen(HashKey(seed, stream, 2 * index + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace dst
