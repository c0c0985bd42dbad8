#include "ddp/record/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>

namespace ddp {

uint32_t crc32c(const void* data, std::size_t size) {
  // Intel's ISA-L picks the fastest instructions at run time. Its iSCSI CRC is CRC-32C without the
  // final inversion, and takes an int length: larger buffers go in pieces, each carrying the CRC on.
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(data));
  unsigned int crc = 0xffffffff;
  while (size > 0) {
    int piece = static_cast<int>(std::min<std::size_t>(size, INT_MAX));
    crc = crc32_iscsi(bytes, piece, crc);
    bytes += piece;
    size -= piece;
  }
  return ~crc;
}

uint32_t masked_crc32c(const void* data, std::size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace ddp
