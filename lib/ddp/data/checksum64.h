#pragma once
// A fast 64-bit checksum for the node-local caches: XXH64's algorithm (Yann Collet's xxHash),
// written out here because Debian's libxxhash-dev is not a build dependency and one function does
// not justify one. It reads 8 bytes per multiply in four independent lanes, so hashing a cache
// costs little next to reading it (gigabytes per second), and it detects any change of a single
// word for certain: each step is a bijection of the lane's state.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ddp {

/// XXH64 (seed 0) of bytes given in any number of pieces: the digest depends only on their
/// concatenation.
class Checksum64 {
 public:
  Checksum64();
  /// Adds `size` bytes at `data`.
  void update(const void* data, std::size_t size);
  /// The checksum of every byte added so far (the state is kept: more may be added).
  uint64_t digest() const;

 private:
  uint64_t lanes_[4];
  uint64_t total_ = 0;
  unsigned char pending_[32];  // bytes that do not yet fill a 32-byte stripe
  std::size_t pending_size_ = 0;
};

/// XXH64 (seed 0) of `bytes` in one call.
uint64_t checksum64(std::string_view bytes);

}  // namespace ddp
