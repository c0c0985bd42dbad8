#pragma once
// Uniform neighbour sampling into message-flow blocks (DGL's MFGs), keyed so that a node's sample
// depends only on (seed, epoch, node, hop): see Note [Keyed sampling].

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "ddp/data/graph.h"

namespace ddp {

/// What makes one draw of neighbours: the same key gives the same neighbours, on any rank, in any batch.
struct SampleKey {
  int64_t seed = 0;
  int64_t epoch = 0;
};

/// One layer's messages: edges from src (local id into the layer's input nodes) to dst (local id
/// into its output nodes). The output nodes are the first num_dst input nodes.
struct Block {
  torch::Tensor src;  ///< int64 [E]
  torch::Tensor dst;  ///< int64 [E]
  int64_t num_src = 0;
  int64_t num_dst = 0;
};

/// A batch's computation graph: the input nodes of the first layer (global ids, the seeds first),
/// and one block per layer, from the first layer (blocks[0]) to the last, whose outputs are the seeds.
struct SampledSubgraph {
  torch::Tensor nodes;  ///< int64 [blocks[0].num_src]
  std::vector<Block> blocks;
};

/// `node`'s in-neighbours drawn for hop `hop` (0: the seeds' own) under `key`: all of them when
/// fanout is -1 or at least the degree, else `fanout` distinct ones, uniformly (Floyd's algorithm).
std::vector<int64_t> sample_neighbors(const Graph& graph, int64_t node, int64_t fanout, int64_t hop,
                                      const SampleKey& key);

/// The blocks of `seeds` (int64 [B], distinct), `fanouts[h]` neighbours per node at hop h (so the
/// model's last layer uses fanouts[0], as PyG's num_neighbors).
SampledSubgraph sample_subgraph(const Graph& graph, const torch::Tensor& seeds, const std::vector<int64_t>& fanouts,
                                const SampleKey& key);

}  // namespace ddp
