#pragma once
// CRC-32C (Castagnoli), as TFRecord files frame their records with it; computed by ISA-L.

#include <cstddef>
#include <cstdint>

namespace ddp {

/// The CRC-32C of `size` bytes at `data`.
uint32_t crc32c(const void* data, std::size_t size);

/// TFRecord's masked form of a CRC: rotated and offset, so that a CRC of data that holds CRCs is
/// not itself a trivial value.
uint32_t masked_crc32c(const void* data, std::size_t size);

}  // namespace ddp
