#pragma once
// PyG's Reddit raw files, so the original multi-GPU example's data works as it is.

#include <string>
#include <vector>

#include "ddp/data/graph.h"

namespace ddp {

/// True when `dir` holds reddit_data.npz (the Reddit layout rather than a plain graph directory).
bool is_reddit_directory(const std::string& dir);

/// Reads `dir`/reddit_data.npz (`feature` float [N, F], `label` int [N], `node_types` 1/2/3 =
/// train/val/test) and `dir`/reddit_graph.npz (a scipy.sparse matrix [N, N] from save_npz, COO as
/// PyG's file is, or CSR), whose entry (i, j) is an edge i → j. Duplicate edges are merged, as PyG's
/// coalesce does. Throws FileError naming the file and member: a missing member, sizes that
/// disagree, a node type other than 1, 2 or 3, an id out of range.
Graph load_reddit_graph(const std::string& dir);

/// The files load_reddit_graph reads, in a fixed order.
std::vector<std::string> reddit_graph_files(const std::string& dir);

}  // namespace ddp
