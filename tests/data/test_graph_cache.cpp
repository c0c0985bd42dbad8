// The graph cache on graph directories the test writes: a cache file is used only if it was built
// from these sources and its arrays match their checksums; otherwise it is rebuilt, with one line
// saying why (without Python: the Reddit files' cache is in test_reddit_graph.cpp).
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <limits>

#include "ddp/data/graph.h"
#include "ddp/data/graph_cache.h"
#include "ddp/data/load_graph.h"
#include "support/log_capture.h"
#include "support/npy_writer.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
namespace fs = std::filesystem;

namespace {

// A graph directory of `n` nodes in a ring, with `features` float features each.
std::string write_graph(const std::string& dir, int64_t n, int64_t features) {
  fs::create_directories(dir);
  test::write_npy(dir + "/features.npy", torch::randn({n, features}));
  test::write_npy(dir + "/labels.npy", torch::arange(n, torch::kInt64).remainder(3));
  auto from = torch::arange(n, torch::kInt64);
  test::write_npy(dir + "/edge_index.npy", torch::stack({from, (from + 1).remainder(n)}));
  test::write_npy(dir + "/train_idx.npy", torch::arange(n / 2, torch::kInt64));
  return dir;
}

fs::path cache_file(const std::string& cache) {
  for (const auto& entry : fs::directory_iterator(cache))
    if (entry.path().extension() == ".ddpgraph") return entry.path();
  return {};
}

torch::Tensor all_features(const Graph& g) { return g.feature_rows(torch::arange(g.num_nodes(), torch::kInt64)); }

}  // namespace

TEST_CASE("NaN written into a graph cache's features is detected by its checksum and rebuilt", "[graph][cache]") {
  test::TempDir dir;
  std::string d = write_graph(dir.file("g"), 50, 4), cache = dir.file("cache");
  Graph memory = load_graph(d);
  load_graph_cached(d, cache);
  fs::path file = cache_file(cache);
  REQUIRE(!file.empty());
  {  // feature 1 of node 7, in place: the file's size and header still agree
    // header (56 bytes), indptr [51], neighbour ids [50], labels [50], train ids [25]
    const int64_t features_at = 56 + 8 * (51 + 50 + 50 + 25);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(features_at + 4 * (7 * 4 + 1));
    f.write(reinterpret_cast<const char*>(&nan), 4);
  }
  test::LogCapture log;
  Graph g = load_graph_cached(d, cache);
  CHECK(torch::equal(all_features(g), memory.features));
  INFO(log.text());
  CHECK(log.count(file.string() + " is not used: its features region does not match its checksum") == 1);
}

TEST_CASE("a graph cache file copied over another graph's is detected and rebuilt", "[graph][cache]") {
  test::TempDir dir;
  std::string a = write_graph(dir.file("a"), 40, 3), b = write_graph(dir.file("b"), 30, 3);
  std::string cache_a = dir.file("cache_a"), cache_b = dir.file("cache_b");
  load_graph_cached(a, cache_a);
  load_graph_cached(b, cache_b);
  fs::copy_file(cache_file(cache_a), cache_file(cache_b), fs::copy_options::overwrite_existing);
  test::LogCapture log;
  Graph g = load_graph_cached(b, cache_b);
  CHECK(g.num_nodes() == 30);
  CHECK(torch::equal(all_features(g), load_graph(b).features));
  INFO(log.text());
  CHECK(log.count(" is not used: it was built from " + fs::absolute(a).string()) == 1);
}

}  // namespace DDP_TEST_FILE
