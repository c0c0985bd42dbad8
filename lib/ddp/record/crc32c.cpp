#include "ddp/record/crc32c.h"

#include <array>

namespace ddp {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78;  // Castagnoli, reflected

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    table[i] = crc;
  }
  return table;
}

constexpr auto kTable = make_table();

}  // namespace

uint32_t crc32c(const void* data, std::size_t size) {
  // A byte at a time: event files are written a few records per log line, far from any hot path.
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xffffffff;
  for (std::size_t i = 0; i < size; ++i) crc = kTable[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffff;
}

uint32_t masked_crc32c(const void* data, std::size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace ddp
