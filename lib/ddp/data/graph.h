#pragma once
// A graph for node classification: in-neighbours in CSR, float32 node features, labels and the
// train/val/test node splits. Read from a directory of plain files (load_graph_directory) or PyG's
// Reddit files (reddit_graph.h), whichever load_graph.h finds; held once per node through the graph
// cache (graph_cache.h).

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/data/sample_file.h"

namespace ddp {

/// Node v's in-neighbours (the sources of the edges into v) are indices[indptr[v] .. indptr[v+1]).
/// The big arrays, indices and features, are in memory or, from the graph cache, read on demand
/// from the node's one copy in the page cache (sample_file.h).
struct Graph {
  torch::Tensor indptr;    ///< int64 [N + 1]
  torch::Tensor indices;   ///< int64 [E]; undefined when `index_file` holds them
  torch::Tensor features;  ///< float32 [N, F]; undefined when `feature_file` holds them
  torch::Tensor labels;    ///< int64 [N]
  torch::Tensor train, val, test;  ///< int64 node ids (each possibly empty)
  std::shared_ptr<const SampleFile> index_file, feature_file;

  int64_t num_nodes() const { return indptr.defined() ? indptr.numel() - 1 : features.size(0); }
  int64_t num_edges() const { return index_file ? index_file->count() : indices.size(0); }
  int64_t num_features() const { return feature_file ? feature_file->sample_shape()[0] : features.size(1); }
  int64_t num_classes() const;
  /// The neighbour ids at CSR positions [begin, begin + n), into `out`.
  void read_indices(int64_t begin, int64_t n, int64_t* out) const;
  /// The features of nodes [first, first + n) into `out` (n * F floats).
  void read_feature_rows(int64_t first, int64_t n, float* out) const;
  /// The features of `nodes` (int64 [n]) as float32 [n, F].
  torch::Tensor feature_rows(const torch::Tensor& nodes) const;
};

/// CSR by destination from the edge list src → dst (int64 [E] each) of a graph of `num_nodes`
/// nodes. Edges keep their order within a destination. Throws FileError naming `source` when an
/// id is out of range.
void build_csr(Graph& graph, const torch::Tensor& src, const torch::Tensor& dst, const std::string& source);

/// Node features as float32 [N, F]: `features` (any floating type), converted; FileError naming
/// `source` for another type or shape, or for a value that is NaN or infinite as float32 (the first).
torch::Tensor node_features(const torch::Tensor& features, const std::string& source);

/// Reads a graph directory:
///   edge_index.npy  int [2, E] (row 0: sources, row 1: destinations), or edges.csv ("src,dst" lines,
///                   an optional header line with no number in it);
///   features.npy    float [N, F];   labels.npy  int [N];
///   train / val / test as node ids (train_idx.npy, ...) or boolean masks (train_mask.npy, ...).
/// Throws FileError naming the file and the cause: missing, malformed, sizes that disagree, ids out
/// of range.
Graph load_graph_directory(const std::string& dir);

/// The files of `dir` that load_graph_directory reads, in a fixed order.
std::vector<std::string> graph_directory_files(const std::string& dir);

}  // namespace ddp
