#pragma once
// SplitMix64 (Steele, Lea and Flood): a counter-based generator whose every state gives a
// well-mixed 64-bit output; cheap enough to start a fresh stream per node or per tensor.

#include <cstdint>

namespace ddp {

/// The next output of the stream at `state`, which it advances.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace ddp
