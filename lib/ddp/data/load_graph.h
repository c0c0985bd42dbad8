#pragma once
// data.dataset graph: the dispatcher over graph layouts. A graph directory is PyG's Reddit files
// when it holds reddit_data.npz (reddit_graph.h), else a directory of plain files (graph.h); the
// generic Graph knows neither, and the graph cache asks here which files identify a graph.

#include <string>
#include <vector>

#include "ddp/data/graph.h"

namespace ddp {

/// The graph in `path`, in whichever layout it is. Throws FileError naming the file at fault.
Graph load_graph(const std::string& path);

/// The files load_graph(path) reads, in a fixed order (their identity names the graph's cache file).
std::vector<std::string> graph_source_files(const std::string& path);

}  // namespace ddp
