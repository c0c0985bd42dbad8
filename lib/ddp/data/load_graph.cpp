#include "ddp/data/load_graph.h"

#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/data/dataset_format.h"
#include "ddp/data/reddit_graph.h"

namespace ddp {

namespace {

// Which form `path` holds: PyG's Reddit files, or a graph directory's own. A directory with both
// is refused, as both forms of one thing in a graph directory are, rather than one ignored.
bool reddit_form(const std::string& path) {
  if (!is_reddit_directory(path)) return false;
  for (const char* own : {"edge_index.npy", "edges.csv", "features.npy", "labels.npy"})
    if (std::filesystem::exists(path + "/" + own))
      throw FileError("data.path: " + path +
                      " holds both PyG's Reddit files (reddit_data.npz) and a graph "
                      "directory's (" +
                      own + "): one of them would be ignored; keep one form");
  return true;
}

}  // namespace

Graph load_graph(const std::string& path) {
  return reddit_form(path) ? load_reddit_graph(path) : load_graph_directory(path);
}

std::vector<std::string> graph_source_files(const std::string& path) {
  return reddit_form(path) ? reddit_graph_files(path) : graph_directory_files(path);
}

// No sample splits: a graph's nodes are split by its own files, and node classification reads it
// whole (graph_cache.h).
void register_graph_format(DatasetFormats& formats) { formats.add("graph").kind = DatasetKind::kGraph; }

}  // namespace ddp
