#pragma once
// IDX datasets decoded once per node: the first worker decodes the (gzipped) files into a cache
// file, and every worker reads its images from that file on demand (sample_file.h), so a node holds
// one copy, in the page cache, instead of one per rank, and later runs skip decompression.

#include <string>

#include "ddp/data/dataset.h"
#include "ddp/data/node_cache.h"

namespace ddp {

/// load_idx_split(dir, split) through the cache in `cache_dir`: a cache file is keyed by the
/// source files' identity (node_cache.h), written atomically under a lock, sealed with the
/// sources it was built from and its regions' checksums, and used only once its seal and header
/// agree and its checksums were verified (Note [Verified once per node]); otherwise it is rebuilt,
/// with one line saying why. If the cache cannot be written, decodes into memory (with a warning).
Dataset load_idx_split_cached(const std::string& dir, const std::string& split, const std::string& cache_dir);

}  // namespace ddp
