#pragma once
// The seal of a node-local cache file (the IDX cache, the graph cache): after the payload, the
// identity of the sources it was built from and a checksum of each region of the payload. A
// cache file is used only if its seal names this run's sources, and its regions were verified
// against their checksums (node_cache.h says when: once per version of the file, not per rank).
//
// A file: region 0 (the cache's own header), region 1, ..., then the seal:
//   per region: uint32 name length, name, uint64 bytes, uint64 checksum (checksum64.h)
//   uint32 sources length, sources (source_identity() of the files it was built from)
//   uint32 region count, uint64 seal bytes (all of the seal), 8-byte magic "DDPSEAL1"
// The regions are contiguous from offset 0, so the checksums cover every byte before the seal.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/common/atomic_file.h"

namespace ddp {

/// Thrown when a cache file is there but must not be used (foreign, damaged, another format
/// version); what() says why, in words for a log line. The caller rebuilds the file.
class CacheRejected : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A region of a cache file to be written: its name in messages ("labels") and its bytes.
struct CacheRegion {
  std::string name;
  std::string_view bytes;
};

/// Writes `path` atomically (write_file_atomically): the regions in order, then their seal naming
/// `sources`. The checksums are taken from the bytes in memory as they are written.
void write_sealed_cache(const std::string& path, const std::vector<CacheRegion>& regions, const std::string& sources,
                        mode_t mode);

/// A region whose bytes `produce` writes into the sink as it makes them, in order.
struct StreamedCacheRegion {
  std::string name;
  std::function<void(const ByteSink&)> produce;
};

/// The same for regions made as they are written (a cache converted from a source larger than
/// memory); the producers run in order, and an exception from one removes the temporary.
void write_sealed_cache(const std::string& path, const std::vector<StreamedCacheRegion>& regions,
                        const std::string& sources, mode_t mode);

/// What a cache file's seal says.
struct CacheSeal {
  /// One region as the seal records it.
  struct Region {
    std::string name;
    int64_t offset = 0, bytes = 0;
    uint64_t checksum = 0;
  };
  std::vector<Region> regions;
  std::string sources;        ///< source_identity() of the files it was built from
  int64_t payload_bytes = 0;  ///< the bytes before the seal: what the cache's header describes
};

/// Reads the seal of the open file `fd`. Throws CacheRejected when it has none (another format
/// version, a file cut short) or the seal does not add up.
CacheSeal read_cache_seal(int fd);

/// Throws CacheRejected unless `seal` names `sources`: a cache copied from another source's (its
/// name is the hash of this source's identity, its content another's) is never used.
void check_cache_sources(const CacheSeal& seal, const std::string& sources);

/// Reads each region of `fd` and throws CacheRejected naming the first whose bytes do not match
/// their checksum.
void verify_cache_regions(int fd, const CacheSeal& seal);

}  // namespace ddp
