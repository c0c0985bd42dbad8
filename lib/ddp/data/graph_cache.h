#pragma once
// A graph converted once per node into one cache file, which every rank then reads the way the IDX
// cache is read: indptr, labels and splits in memory, neighbour lists and features on demand from
// the node's one copy in the page cache (sample_file.h). A rank's resident memory then holds its
// batches, not a copy of the graph.

#include <string>

#include "ddp/data/graph.h"

namespace ddp {

/// load_graph(path) through the cache in `cache_dir` (node_cache.h): a file sealed with the
/// sources it was built from and a checksum per array, verified once per version of the file
/// (Note [Verified once per node]) and rebuilt, with one line saying why, if it does not match.
/// In memory, with a warning, if the cache cannot be written, and without one when `cache_dir` is
/// "none".
Graph load_graph_cached(const std::string& path, const std::string& cache_dir);

}  // namespace ddp
