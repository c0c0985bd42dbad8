#pragma once
// A fast 64-bit checksum for the node-local caches: XXH64, from Debian's libxxhash (whose library
// apt itself depends on). It reads 8 bytes per multiply in four independent lanes, so hashing a cache
// costs little next to reading it (gigabytes per second), and it detects any change of a single
// word for certain: each step is a bijection of the lane's state.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

struct XXH64_state_s;

namespace ddp {

/// XXH64 (seed 0) of bytes given in any number of pieces: the digest depends only on their
/// concatenation.
class Checksum64 {
 public:
  Checksum64();
  ~Checksum64();
  /// Adds `size` bytes at `data`.
  void update(const void* data, std::size_t size);
  /// The checksum of every byte added so far (the state is kept: more may be added).
  uint64_t digest() const;

 private:
  struct FreeState {
    void operator()(XXH64_state_s* state) const;
  };
  std::unique_ptr<XXH64_state_s, FreeState> state_;
};

/// XXH64 (seed 0) of `bytes` in one call.
uint64_t checksum64(std::string_view bytes);

}  // namespace ddp
