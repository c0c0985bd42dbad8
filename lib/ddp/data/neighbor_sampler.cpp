#include "ddp/data/neighbor_sampler.h"

#include <algorithm>
#include <unordered_map>

#include "ddp/common/splitmix64.h"

namespace ddp {

// Note [Keyed sampling]
// Each (seed, epoch, node, hop) has its own random stream (SplitMix64 from a hash of the four), so
// the neighbours a node gets do not depend on which rank, which batch or which other nodes are
// drawn with it. Hence world 1 with batch 2B computes what world 2 with batch B does (the two
// ranks' batches are the halves of the one), and a resumed run draws what an uninterrupted one
// would. A node appears in every hop's destinations (DGL's blocks keep the layer's outputs as a
// prefix of its inputs) and is drawn afresh at each hop.

namespace {

uint64_t stream_of(const SampleKey& key, int64_t node, int64_t hop) {
  uint64_t state = static_cast<uint64_t>(key.seed);
  uint64_t mixed = splitmix64(state);
  for (uint64_t part : {static_cast<uint64_t>(key.epoch), static_cast<uint64_t>(node), static_cast<uint64_t>(hop)}) {
    state = mixed ^ part;
    mixed = splitmix64(state);
  }
  return mixed;
}

// Uniform in [0, bound), by Lemire's multiply-shift (bias below 2^-40 for these bounds).
uint64_t below(uint64_t& state, uint64_t bound) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(splitmix64(state)) * bound) >> 64);
}

}  // namespace

std::vector<int64_t> sample_neighbors(const Graph& graph, int64_t node, int64_t fanout, int64_t hop,
                                      const SampleKey& key) {
  const int64_t* indptr = graph.indptr.data_ptr<int64_t>();
  int64_t begin = indptr[node], degree = indptr[node + 1] - begin;
  std::vector<int64_t> neighbours;
  if (fanout < 0 || fanout >= degree) {
    neighbours.resize(static_cast<std::size_t>(degree));
    graph.read_indices(begin, degree, neighbours.data());
    return neighbours;
  }
  // Floyd: a uniform k-subset of positions [0, degree) in k draws.
  uint64_t state = stream_of(key, node, hop);
  std::vector<int64_t> positions;
  positions.reserve(static_cast<std::size_t>(fanout));
  for (int64_t j = degree - fanout; j < degree; ++j) {
    auto t = static_cast<int64_t>(below(state, static_cast<uint64_t>(j + 1)));
    bool taken = std::find(positions.begin(), positions.end(), t) != positions.end();
    positions.push_back(taken ? j : t);
  }
  std::sort(positions.begin(), positions.end());  // the neighbours in CSR order, whatever the draws
  neighbours.resize(positions.size());
  // From the graph cache a read costs about what copying 10 KB does: a list is read whole unless it
  // is a hub's, whose drawn positions are read one by one.
  if (degree <= 1024 * fanout) {
    std::vector<int64_t> all(static_cast<std::size_t>(degree));
    graph.read_indices(begin, degree, all.data());
    for (std::size_t i = 0; i < positions.size(); ++i) neighbours[i] = all[static_cast<std::size_t>(positions[i])];
  } else {
    for (std::size_t i = 0; i < positions.size(); ++i) graph.read_indices(begin + positions[i], 1, &neighbours[i]);
  }
  return neighbours;
}

SampledSubgraph sample_subgraph(const Graph& graph, const torch::Tensor& seeds, const std::vector<int64_t>& fanouts,
                                const SampleKey& key) {
  auto seed_ids = seeds.to(torch::kInt64).contiguous();
  std::vector<int64_t> nodes(seed_ids.data_ptr<int64_t>(), seed_ids.data_ptr<int64_t>() + seed_ids.numel());
  std::unordered_map<int64_t, int64_t> local;
  local.reserve(nodes.size() * 8);
  for (std::size_t i = 0; i < nodes.size(); ++i) local.emplace(nodes[i], static_cast<int64_t>(i));

  std::vector<Block> hops;  // hop 0 first: the last layer's block
  for (std::size_t hop = 0; hop < fanouts.size(); ++hop) {
    int64_t num_dst = static_cast<int64_t>(nodes.size());
    std::vector<int64_t> src, dst;
    for (int64_t d = 0; d < num_dst; ++d) {
      for (int64_t neighbour : sample_neighbors(graph, nodes[static_cast<std::size_t>(d)], fanouts[hop],
                                                static_cast<int64_t>(hop), key)) {
        auto [it, added] = local.emplace(neighbour, static_cast<int64_t>(nodes.size()));
        if (added) nodes.push_back(neighbour);
        src.push_back(it->second);
        dst.push_back(d);
      }
    }
    Block block;
    block.src = torch::tensor(src, torch::kInt64);
    block.dst = torch::tensor(dst, torch::kInt64);
    block.num_dst = num_dst;
    block.num_src = static_cast<int64_t>(nodes.size());
    hops.push_back(std::move(block));
  }
  SampledSubgraph subgraph;
  subgraph.nodes = torch::tensor(nodes, torch::kInt64);
  subgraph.blocks.assign(hops.rbegin(), hops.rend());
  return subgraph;
}

}  // namespace ddp
