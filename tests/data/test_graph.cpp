// Graph directories and the keyed neighbour sampler: the sampler's properties (true neighbours, no
// duplicates, min(fanout, degree), the same key the same draw, uniform), the blocks' shape, and the
// loader on good and broken files.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "ddp/common/error.h"
#include "ddp/data/graph.h"
#include "ddp/data/neighbor_sampler.h"
#include "support/npy_writer.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using Catch::Contains;

namespace {

// A random graph of `n` nodes whose degrees spread from 0 to ~3·mean (no self-loops, no repeats).
Graph random_graph(int64_t n, int64_t mean_degree, uint64_t seed) {
  torch::manual_seed(seed);
  Graph g;
  g.features = torch::randn({n, 4});
  g.labels = torch::randint(0, 3, {n}, torch::kInt64);
  std::vector<int64_t> src, dst;
  for (int64_t v = 0; v < n; ++v) {
    int64_t degree = v % 7 == 0 ? 0 : torch::randint(0, 3 * mean_degree, {1}).item<int64_t>();
    auto chosen = torch::randperm(n, torch::kInt64).narrow(0, 0, std::min(degree + 1, n));
    for (int64_t i = 0, taken = 0; i < chosen.size(0) && taken < degree; ++i)
      if (chosen[i].item<int64_t>() != v) src.push_back(chosen[i].item<int64_t>()), dst.push_back(v), ++taken;
  }
  build_csr(g, torch::tensor(src, torch::kInt64), torch::tensor(dst, torch::kInt64), "test");
  g.train = torch::arange(n, torch::kInt64);
  return g;
}

std::set<int64_t> neighbours_of(const Graph& g, int64_t v) {
  auto begin = g.indptr[v].item<int64_t>(), end = g.indptr[v + 1].item<int64_t>();
  std::set<int64_t> out;
  for (int64_t i = begin; i < end; ++i) out.insert(g.indices[i].item<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("sampled neighbours are true neighbours, distinct, min(fanout, degree) of them, and keyed", "[graph][sampler]") {
  Graph g = random_graph(300, 12, 1);
  for (int64_t v = 0; v < g.num_nodes(); ++v) {
    auto truth = neighbours_of(g, v);
    for (int64_t fanout : {-1, 0, 1, 5, 25}) {
      auto drawn = sample_neighbors(g, v, fanout, 0, {7, 3});
      INFO("node " << v << " degree " << truth.size() << " fanout " << fanout);
      std::size_t expected = fanout < 0 ? truth.size() : std::min<std::size_t>(fanout, truth.size());
      CHECK(drawn.size() == expected);
      CHECK(std::set<int64_t>(drawn.begin(), drawn.end()).size() == drawn.size());
      for (int64_t u : drawn) CHECK(truth.count(u) == 1);
      CHECK(drawn == sample_neighbors(g, v, fanout, 0, {7, 3}));  // the same key, the same draw
    }
  }
  // Another epoch, hop or seed draws anew (for a node with more neighbours than the fanout).
  int64_t busy = 0;
  while (neighbours_of(g, busy).size() < 20) ++busy;
  auto base = sample_neighbors(g, busy, 5, 0, {7, 3});
  CHECK(base != sample_neighbors(g, busy, 5, 0, {7, 4}));
  CHECK(base != sample_neighbors(g, busy, 5, 1, {7, 3}));
  CHECK(base != sample_neighbors(g, busy, 5, 0, {8, 3}));
}

TEST_CASE("each neighbour is drawn equally often: chi-square over 20000 epochs", "[graph][sampler]") {
  // One node with 10 in-neighbours, 3 drawn per epoch: each should be drawn 6000 times.
  Graph g;
  g.features = torch::zeros({11, 1});
  g.labels = torch::zeros({11}, torch::kInt64);
  build_csr(g, torch::arange(1, 11, torch::kInt64), torch::zeros({10}, torch::kInt64), "star");
  std::vector<double> counts(11, 0);
  const int epochs = 20000;
  for (int e = 0; e < epochs; ++e)
    for (int64_t u : sample_neighbors(g, 0, 3, 0, {1, e})) counts[static_cast<std::size_t>(u)] += 1;
  double expected = epochs * 3.0 / 10, chi2 = 0;
  for (int u = 1; u <= 10; ++u) chi2 += (counts[u] - expected) * (counts[u] - expected) / expected;
  INFO("chi-square " << chi2);
  CHECK(chi2 < 27.88);  // 9 degrees of freedom, p = 0.001
}

TEST_CASE("blocks keep each layer's outputs as a prefix of its inputs, and their edges are the graph's", "[graph][sampler]") {
  Graph g = random_graph(200, 8, 2);
  auto seeds = torch::tensor({5, 17, 42, 99}, torch::kInt64);
  auto sub = sample_subgraph(g, seeds, {4, 3}, {0, 1});
  REQUIRE(sub.blocks.size() == 2);
  CHECK(torch::equal(sub.nodes.narrow(0, 0, 4), seeds));
  CHECK(sub.blocks[1].num_dst == 4);                          // the last layer's outputs: the seeds
  CHECK(sub.blocks[0].num_dst == sub.blocks[1].num_src);      // a layer's outputs feed the next
  CHECK(sub.blocks[0].num_src == sub.nodes.size(0));
  CHECK(std::set<int64_t>(sub.nodes.data_ptr<int64_t>(), sub.nodes.data_ptr<int64_t>() + sub.nodes.numel()).size() ==
        static_cast<std::size_t>(sub.nodes.numel()));
  for (const auto& block : sub.blocks)
    for (int64_t e = 0; e < block.src.size(0); ++e) {
      int64_t s = block.src[e].item<int64_t>(), d = block.dst[e].item<int64_t>();
      REQUIRE(s < block.num_src);
      REQUIRE(d < block.num_dst);
      CHECK(neighbours_of(g, sub.nodes[d].item<int64_t>()).count(sub.nodes[s].item<int64_t>()) == 1);
    }
  // A node's draw does not depend on the batch it is in.
  auto alone = sample_subgraph(g, torch::tensor({42}, torch::kInt64), {4, 3}, {0, 1});
  std::set<int64_t> with_others, by_itself;
  for (int64_t e = 0; e < sub.blocks[1].src.size(0); ++e)
    if (sub.blocks[1].dst[e].item<int64_t>() == 2) with_others.insert(sub.nodes[sub.blocks[1].src[e].item<int64_t>()].item<int64_t>());
  for (int64_t e = 0; e < alone.blocks[1].src.size(0); ++e)
    by_itself.insert(alone.nodes[alone.blocks[1].src[e].item<int64_t>()].item<int64_t>());
  CHECK(with_others == by_itself);
}

TEST_CASE("a graph directory loads from NPY or CSV edges and masks or ids, and broken ones are named", "[graph][data]") {
  test::TempDir dir;
  auto make = [&](const std::string& name) {
    std::string d = dir.file(name);
    std::filesystem::create_directories(d);
    test::write_npy(d + "/features.npy", torch::arange(12, torch::kFloat32).view({4, 3}));
    test::write_npy(d + "/labels.npy", torch::tensor({0, 1, 2, 1}, torch::kInt64));
    test::write_npy(d + "/edge_index.npy", torch::tensor({{1, 2, 3, 0}, {0, 0, 1, 3}}, torch::kInt64));
    test::write_npy(d + "/train_idx.npy", torch::tensor({0, 1}, torch::kInt64));
    test::write_npy(d + "/val_mask.npy", torch::tensor({false, false, true, false}));
    return d;
  };
  Graph g = load_graph_directory(make("good"));
  CHECK(g.num_nodes() == 4);
  CHECK(g.num_edges() == 4);
  CHECK(torch::equal(g.indptr, torch::tensor({0, 2, 3, 3, 4}, torch::kInt64)));
  CHECK(torch::equal(g.indices, torch::tensor({1, 2, 3, 0}, torch::kInt64)));  // into 0: from 1, 2 (file order)
  CHECK(torch::equal(g.val, torch::tensor({2}, torch::kInt64)));
  CHECK(g.test.numel() == 0);
  CHECK(g.num_classes() == 3);

  std::string csv = make("csv");
  std::filesystem::remove(csv + "/edge_index.npy");
  test::write_file(csv + "/edges.csv", "src,dst\n1,0\r\n2,0\n3,1\n0,3\n");
  CHECK(torch::equal(load_graph_directory(csv).indices, g.indices));

  auto refused = [&](const std::string& d, const std::string& cause) {
    INFO(cause);
    CHECK_THROWS_AS(load_graph_directory(d), FileError);
    CHECK_THROWS_WITH(load_graph_directory(d), Contains(cause));
  };
  std::string d = make("out_of_range");
  test::write_npy(d + "/edge_index.npy", torch::tensor({{1, 9}, {0, 0}}, torch::kInt64));
  refused(d, "edge_index.npy: an edge's source node is out of range: ids must be in [0, 4), found 1..9");
  d = make("labels");
  test::write_npy(d + "/labels.npy", torch::tensor({0, 1}, torch::kInt64));
  refused(d, "labels.npy has 2 labels, but " + d + "/features.npy has 4 rows: one of each per node");
  d = make("no_features");
  std::filesystem::remove(d + "/features.npy");
  refused(d, "features.npy");
  d = make("no_edges");
  std::filesystem::remove(d + "/edge_index.npy");
  refused(d, "has no edges (edge_index.npy or edges.csv)");
  d = make("bad_csv");
  std::filesystem::remove(d + "/edge_index.npy");
  test::write_file(d + "/edges.csv", "1,0\n2;0\n");
  refused(d, "edges.csv:2: expected two node ids \"src,dst\", got '2;0'");
  // The first line is a header only when it holds no digit; a byte order mark before it is no edge.
  // "7 3" and "100;79" are edges with another separator, dropped as headers once, an edge lost.
  for (const std::string first : {"0,1,2", "7 3", "100;79", "src1,dst2"}) {
    test::write_file(d + "/edges.csv", first + "\n1,0\n");
    refused(d, "edges.csv:1: expected two node ids \"src,dst\", got '" + first + "'");
  }
  for (const std::string first : {"\xEF\xBB\xBF" "1,0\n", "\xEF\xBB\xBF" "src,dst\n1,0\n", "from,to\r\n1,0\r\n", " 1 ,\t0\n"}) {
    test::write_file(d + "/edges.csv", first + "2,0\n3,1\n0,3\n");
    CHECK(load_graph_directory(d).indices.numel() == 4);
  }
  // An empty or header-only edge list, or an empty [2, 0] array: no graph.
  for (const std::string empty : {"", "src,dst\n"}) {
    test::write_file(d + "/edges.csv", empty);
    refused(d, d + "/edges.csv: no edges; a graph needs at least one");
  }
  d = make("no_edge");
  test::write_npy(d + "/edge_index.npy", torch::zeros({2, 0}, torch::kInt64));
  refused(d, "edge_index.npy: no edges; a graph needs at least one");
  d = make("mask");
  test::write_npy(d + "/val_mask.npy", torch::tensor({true, false}));
  refused(d, "val_mask.npy: expected one flag per node (4), got shape [2]");
  test::write_npy(d + "/val_mask.npy", torch::tensor({0, 1, 2, 0}, torch::kInt64));
  refused(d, "val_mask.npy: expected flags of 0 or 1 (or bool), found 2 at node 2");
  // Two files for one thing: neither is ignored silently.
  d = make("both_splits");
  test::write_npy(d + "/train_mask.npy", torch::tensor({false, false, true, true}));
  refused(d, "has both train_idx.npy and train_mask.npy; keep one");
  d = make("both_edges");
  test::write_file(d + "/edges.csv", "1,0\n");
  refused(d, "has both edge_index.npy and edges.csv; keep one");
  d = make("float_labels");
  test::write_npy(d + "/labels.npy", torch::tensor({0.0f, 1.0f, 2.0f, 1.0f}));
  refused(d, "labels.npy: expected one integer label per node (4), got [4] of Float");
  d = make("split_range");
  test::write_npy(d + "/train_idx.npy", torch::tensor({0, 4}, torch::kInt64));
  refused(d, "train_idx.npy: node ids must be in [0, 4), found 0..4");
  d = make("int_features");
  test::write_npy(d + "/features.npy", torch::zeros({4, 3}, torch::kInt64));
  refused(d, "features.npy: expected a float array [nodes, features], got [4, 3] of Long");
  for (const auto& [value, what] : {std::pair{std::nan(""), "NaN"}, std::pair{1e300, "infinite (as float32)"}}) {
    d = make(std::string("nonfinite_features_") + what[0]);
    auto features = torch::ones({4, 3}, torch::kDouble);
    features[2][1] = value;  // 1e300: finite as float64, beyond float32's range
    test::write_npy(d + "/features.npy", features);
    refused(d, std::string("features.npy: feature 1 of node 2 is ") + what + "; training needs finite features (fix "
                                                                             "that node's)");
  }
  d = make("negative_label");
  test::write_npy(d + "/labels.npy", torch::tensor({0, -1, 2, 1}, torch::kInt64));
  refused(d, "labels.npy: labels must be >= 0");
  d = make("edge_shape");
  test::write_npy(d + "/edge_index.npy", torch::tensor({1, 2, 3}, torch::kInt64));
  refused(d, "edge_index.npy: expected integer node ids [2, edges], got [3] of Long");
  test::write_npy(d + "/edge_index.npy", torch::tensor({{1.0f, 2.0f}, {0.0f, 1.0f}}));  // the dtype is the cause
  refused(d, "edge_index.npy: expected integer node ids [2, edges], got [2, 2] of Float");
  d = make("no_feature_columns");  // built a cache that could not be opened, then failed in GraphSAGE
  test::write_npy(d + "/features.npy", torch::zeros({4, 0}));
  refused(d, "features.npy: no feature columns (shape [4, 0]): a node needs at least one feature");
  d = make("split_shape");
  test::write_npy(d + "/train_idx.npy", torch::zeros({2, 2}, torch::kInt64));
  refused(d, "train_idx.npy: expected a 1-D array of integer node ids");
  refused(dir.file("nowhere"), "data.path: no graph directory " + dir.file("nowhere"));
  d = make("no_train");
  std::filesystem::remove(d + "/train_idx.npy");
  refused(d, "has no training nodes");
  // A node evaluated on that trained the model, or drawn twice an epoch, passed silently.
  d = make("repeated");
  test::write_npy(d + "/train_idx.npy", torch::tensor({3, 1, 3, 1, 0}, torch::kInt64));
  refused(d, d + "/train_idx.npy: node 1 appears more than once (2 repeats): list each node once");
  d = make("shared");
  test::write_npy(d + "/train_idx.npy", torch::tensor({0, 1, 2}, torch::kInt64));  // node 2 is val_mask's
  test::write_npy(d + "/test_idx.npy", torch::tensor({3}, torch::kInt64));
  refused(d, "data.path: " + d + ": node 2 is in both train_idx.npy and val_mask.npy (1 shared nodes): the splits must "
             "not share nodes, or evaluation measures nodes the model trained on");
  test::write_npy(d + "/train_idx.npy", torch::tensor({0, 1}, torch::kInt64));
  test::write_npy(d + "/test_mask.npy", torch::tensor({false, true, true, true}));
  std::filesystem::remove(d + "/test_idx.npy");
  refused(d, "node 1 is in both train_idx.npy and test_mask.npy (2 shared nodes)");
  test::write_npy(d + "/test_mask.npy", torch::tensor({false, false, false, true}));
  CHECK(load_graph_directory(d).test.numel() == 1);  // disjoint: train 0 1, val 2, test 3
}

}  // namespace DDP_TEST_FILE
