#include "ddp/data/load_graph.h"

#include "ddp/data/dataset_format.h"
#include "ddp/data/reddit_graph.h"

namespace ddp {

Graph load_graph(const std::string& path) {
  return is_reddit_directory(path) ? load_reddit_graph(path) : load_graph_directory(path);
}

std::vector<std::string> graph_source_files(const std::string& path) {
  return is_reddit_directory(path) ? reddit_graph_files(path) : graph_directory_files(path);
}

// No sample splits: a graph's nodes are split by its own files, and node classification reads it
// whole (graph_cache.h).
void register_graph_format(DatasetFormats& formats) { formats.add("graph").kind = DatasetKind::kGraph; }

}  // namespace ddp
