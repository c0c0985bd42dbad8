#pragma once
// IDX datasets decoded once per node: the first worker decodes the (gzipped) files into a cache
// file, and every worker reads its images from that file on demand (sample_file.h), so a node holds
// one copy, in the page cache, instead of one per rank, and later runs skip decompression.

#include <string>

#include "ddp/data/dataset.h"
#include "ddp/data/node_cache.h"

namespace ddp {

/// load_idx_split(dir, split) through the cache in `cache_dir`: a cache file is keyed by the
/// source files' paths, sizes and modification times, written atomically under a lock, and
/// verified by its header. If the cache cannot be written, decodes into memory (with a warning).
Dataset load_idx_split_cached(const std::string& dir, const std::string& split, const std::string& cache_dir);

}  // namespace ddp
