#include "ddp/data/checksum64.h"

#include <algorithm>
#include <cstring>

namespace ddp {
namespace {

constexpr uint64_t kP1 = 11400714785074694791ull, kP2 = 14029467366897019727ull, kP3 = 1609587929392839161ull,
                   kP4 = 9650029242287828579ull, kP5 = 2870177450012600261ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Little-endian loads whatever the alignment (the host is little-endian, as the cache files are).
uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t load32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint64_t round(uint64_t lane, uint64_t input) { return rotl(lane + input * kP2, 31) * kP1; }
uint64_t merge(uint64_t hash, uint64_t lane) { return (hash ^ round(0, lane)) * kP1 + kP4; }

// One 32-byte stripe into the four lanes.
void stripe(uint64_t* lanes, const unsigned char* p) {
  for (int i = 0; i < 4; ++i) lanes[i] = round(lanes[i], load64(p + 8 * i));
}

}  // namespace

Checksum64::Checksum64() : lanes_{kP1 + kP2, kP2, 0, 0 - kP1} {}

void Checksum64::update(const void* data, std::size_t size) {
  auto p = static_cast<const unsigned char*>(data);
  total_ += size;
  if (pending_size_ > 0) {
    std::size_t take = std::min(size, 32 - pending_size_);
    std::memcpy(pending_ + pending_size_, p, take);
    pending_size_ += take, p += take, size -= take;
    if (pending_size_ < 32) return;
    stripe(lanes_, pending_);
    pending_size_ = 0;
  }
  for (; size >= 32; p += 32, size -= 32) stripe(lanes_, p);
  std::memcpy(pending_, p, size);
  pending_size_ = size;
}

uint64_t Checksum64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
    for (uint64_t lane : lanes_) h = merge(h, lane);
  } else {
    h = kP5;  // the seed (0) + P5
  }
  h += total_;
  const unsigned char* p = pending_;
  std::size_t left = pending_size_;
  for (; left >= 8; p += 8, left -= 8) h = rotl(h ^ round(0, load64(p)), 27) * kP1 + kP4;
  if (left >= 4) {
    h = rotl(h ^ (static_cast<uint64_t>(load32(p)) * kP1), 23) * kP2 + kP3;
    p += 4, left -= 4;
  }
  for (; left > 0; ++p, --left) h = rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  return h ^ (h >> 32);
}

uint64_t checksum64(std::string_view bytes) {
  Checksum64 sum;
  sum.update(bytes.data(), bytes.size());
  return sum.digest();
}

}  // namespace ddp
