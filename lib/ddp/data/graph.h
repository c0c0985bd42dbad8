#pragma once
// A graph for node classification: in-neighbours in CSR, float32 node features, labels and the
// train/val/test node splits. Read from a directory of plain files (see load_graph_directory).

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace ddp {

/// Node v's in-neighbours (the sources of the edges into v) are indices[indptr[v] .. indptr[v+1]).
struct Graph {
  torch::Tensor indptr;    ///< int64 [N + 1]
  torch::Tensor indices;   ///< int64 [E]
  torch::Tensor features;  ///< float32 [N, F]
  torch::Tensor labels;    ///< int64 [N]
  torch::Tensor train, val, test;  ///< int64 node ids (each possibly empty)

  int64_t num_nodes() const { return features.size(0); }
  int64_t num_edges() const { return indices.size(0); }
  int64_t num_features() const { return features.size(1); }
  int64_t num_classes() const;
};

/// CSR by destination from the edge list src → dst (int64 [E] each) of a graph of `num_nodes`
/// nodes. Edges keep their order within a destination. Throws FileError naming `source` when an
/// id is out of range.
void build_csr(Graph& graph, const torch::Tensor& src, const torch::Tensor& dst, const std::string& source);

/// Reads a graph directory:
///   edge_index.npy  int [2, E] (row 0: sources, row 1: destinations), or edges.csv ("src,dst" lines,
///                   an optional header line);
///   features.npy    float [N, F];   labels.npy  int [N];
///   train / val / test as node ids (train_idx.npy, ...) or boolean masks (train_mask.npy, ...).
/// Throws FileError naming the file and the cause: missing, malformed, sizes that disagree, ids out
/// of range.
Graph load_graph_directory(const std::string& dir);

}  // namespace ddp
