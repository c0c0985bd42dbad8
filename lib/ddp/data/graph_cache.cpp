#include "ddp/data/graph_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>

#include "ddp/data/node_cache.h"
#include "ddp/data/reddit_graph.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'D', 'D', 'P', 'G', 'R', 'P', 'H', '1'};

// The cache file: this header, then int64 indptr [N + 1], indices [E], labels [N], train, val and
// test ids, then float32 features [N, F].
struct Header {
  char magic[8];
  int64_t nodes, edges, features, train, val, test;
};

// The files a graph is read from, in a fixed order: their identity names the cache file.
std::vector<std::string> source_files(const std::string& path) {
  if (is_reddit_directory(path)) return {path + "/reddit_data.npz", path + "/reddit_graph.npz"};
  std::vector<std::string> files;
  for (const auto& name : {"features.npy", "labels.npy", "edge_index.npy", "edges.csv", "train_idx.npy", "train_mask.npy",
                           "val_idx.npy", "val_mask.npy", "test_idx.npy", "test_mask.npy"})
    if (fs::is_regular_file(path + "/" + name)) files.push_back(path + "/" + name);
  return files;
}

void append(std::string& bytes, const torch::Tensor& t) {
  auto c = t.contiguous();
  bytes.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

std::string encode(const Graph& graph) {
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.nodes = graph.num_nodes();
  header.edges = graph.num_edges();
  header.features = graph.num_features();
  header.train = graph.train.numel();
  header.val = graph.val.numel();
  header.test = graph.test.numel();
  std::string bytes(reinterpret_cast<const char*>(&header), sizeof header);
  bytes.reserve(sizeof header + (header.nodes * 2 + 1 + header.edges + header.train + header.val + header.test) * 8 +
                header.nodes * header.features * 4);
  for (const auto& t : {graph.indptr, graph.indices, graph.labels, graph.train, graph.val, graph.test}) append(bytes, t);
  append(bytes, graph.features);
  return bytes;
}

// The graph in a cache file; nullopt when it is missing or does not hold what its header says.
std::optional<Graph> open_cache(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat info {};
  Header h{};
  bool ok = fstat(fd, &info) == 0 && pread(fd, &h, sizeof h, 0) == sizeof h && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 &&
            h.nodes >= 0 && h.edges >= 0 && h.features > 0 && h.train >= 0 && h.val >= 0 && h.test >= 0;
  const int64_t small = (h.nodes + 1) + h.edges + h.nodes + h.train + h.val + h.test;
  ok = ok && info.st_size == static_cast<off_t>(sizeof h + small * 8 + h.nodes * h.features * 4);
  Graph graph;
  int64_t at = sizeof h;
  auto read = [&](torch::Tensor& t, int64_t n) {
    t = torch::empty({n}, torch::kInt64);
    ok = ok && pread(fd, t.data_ptr(), n * 8, at) == n * 8;
    at += n * 8;
  };
  if (ok) {
    read(graph.indptr, h.nodes + 1);
    const int64_t indices_at = at;
    at += h.edges * 8;
    read(graph.labels, h.nodes);
    read(graph.train, h.train);
    read(graph.val, h.val);
    read(graph.test, h.test);
    int index_fd = ok ? dup(fd) : -1;
    if (index_fd >= 0) {
      graph.index_file = std::make_shared<SampleFile>(index_fd, path, indices_at, h.edges, std::vector<int64_t>{}, torch::kInt64);
      graph.feature_file = std::make_shared<SampleFile>(fd, path, at, h.nodes, std::vector<int64_t>{h.features}, torch::kFloat32);
      return graph;
    }
  }
  close(fd);
  return std::nullopt;
}

}  // namespace

Graph load_graph_cached(const std::string& path, const std::string& cache_dir) {
  auto sources = source_files(path);
  std::string name = sources.empty() ? "" : cache_file_name("graph", sources, "ddpgraph");
  if (cache_dir.empty() || cache_dir == "none" || name.empty()) return load_graph(path);
  std::string file = cache_dir + "/" + name;
  std::optional<Graph> result;
  bool opened = open_or_build_cache(
      file, [&] { return (result = open_cache(file)).has_value(); }, [&] { return encode(load_graph(path)); },
      cache_file_mode(sources.front()), path);
  return opened ? *result : load_graph(path);
}

}  // namespace ddp
