#include "ddp/data/graph_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "ddp/data/cache_seal.h"
#include "ddp/data/load_graph.h"
#include "ddp/data/node_cache.h"

namespace ddp {
namespace {

// Format 2 added the seal (cache_seal.h); a file of format 1 has none and is rebuilt.
constexpr char kGraphMagic[8] = {'D', 'D', 'P', 'G', 'R', 'P', 'H', '2'};

// The cache file: this header, then int64 indptr [N + 1], indices [E], labels [N], train, val and
// test ids, then float32 features [N, F], then the seal; the header and each array are a region.
struct GraphHeader {
  char magic[8];
  int64_t nodes, edges, features, train, val, test;
};

std::string_view bytes_of(const torch::Tensor& t) {
  TORCH_CHECK(t.is_contiguous());
  return {static_cast<const char*>(t.data_ptr()), static_cast<std::size_t>(t.numel() * t.element_size())};
}

// Writes the graph's cache file from its arrays as they are in memory.
void write_graph_cache(const std::string& path, mode_t mode, const Graph& graph, const std::string& sources) {
  GraphHeader header{};
  std::memcpy(header.magic, kGraphMagic, sizeof kGraphMagic);
  header.nodes = graph.num_nodes();
  header.edges = graph.num_edges();
  header.features = graph.num_features();
  header.train = graph.train.numel();
  header.val = graph.val.numel();
  header.test = graph.test.numel();
  const std::vector<std::pair<std::string, torch::Tensor>> arrays{
      {"indptr", graph.indptr.contiguous()}, {"neighbour ids", graph.indices.contiguous()},
      {"labels", graph.labels.contiguous()}, {"train ids", graph.train.contiguous()},
      {"val ids", graph.val.contiguous()},   {"test ids", graph.test.contiguous()},
      {"features", graph.features.contiguous()}};
  std::vector<CacheRegion> regions{{"header", {reinterpret_cast<const char*>(&header), sizeof header}}};
  for (const auto& [name, t] : arrays) regions.push_back({name, bytes_of(t)});
  write_sealed_cache(path, regions, sources, mode);
}

// Whether the arrays read from a cache file describe a graph: a damaged or foreign file is rebuilt,
// never trusted (the sampler indexes indptr with the ids it finds).
bool consistent(const Graph& g, int64_t edges) {
  const int64_t n = g.num_nodes();
  auto in_range = [n](const torch::Tensor& ids) {
    return ids.numel() == 0 || (ids.min().item<int64_t>() >= 0 && ids.max().item<int64_t>() < n);
  };
  return g.indptr[0].item<int64_t>() == 0 && g.indptr[n].item<int64_t>() == edges &&
         (n == 0 || (g.indptr.diff() >= 0).all().item<bool>()) && (n == 0 || g.labels.min().item<int64_t>() >= 0) &&
         in_range(g.train) && in_range(g.val) && in_range(g.test);
}

// The graph in a cache file; nullopt when it is missing, CacheRejected when it is not what these
// sources would build (its seal, its header, its CSR).
std::optional<Graph> open_graph_cache(const std::string& path, const std::string& sources) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  try {
    CacheSeal seal = read_cache_seal(fd);
    check_cache_sources(seal, sources);
    GraphHeader h{};
    if (pread(fd, &h, sizeof h, 0) != sizeof h || std::memcmp(h.magic, kGraphMagic, sizeof kGraphMagic) != 0 || h.nodes < 0 ||
        h.edges < 0 || h.features <= 0 || h.train < 0 || h.val < 0 || h.test < 0)
      throw CacheRejected("its header is not a graph cache's of this format");
    int64_t small = 0, feature_count = 0, expected = 0;
    bool overflow = __builtin_add_overflow(h.nodes, h.nodes + 1, &small) || __builtin_add_overflow(small, h.edges, &small) ||
                    __builtin_add_overflow(small, h.train, &small) || __builtin_add_overflow(small, h.val, &small) ||
                    __builtin_add_overflow(small, h.test, &small) || __builtin_mul_overflow(small, 8, &small) ||
                    __builtin_mul_overflow(h.nodes, h.features, &feature_count) ||
                    __builtin_mul_overflow(feature_count, 4, &feature_count) ||
                    __builtin_add_overflow(small, feature_count, &expected) ||
                    __builtin_add_overflow(expected, static_cast<int64_t>(sizeof h), &expected);
    if (overflow || seal.payload_bytes != expected)
      throw CacheRejected("its header describes " + std::to_string(h.nodes) + " nodes and " + std::to_string(h.edges) +
                          " edges, not the " + std::to_string(seal.payload_bytes) + " bytes it holds");
    Graph graph;
    int64_t at = sizeof h;
    auto read = [&](torch::Tensor& t, int64_t n) {
      t = torch::empty({n}, torch::kInt64);
      if (pread(fd, t.data_ptr(), n * 8, at) != n * 8) throw CacheRejected("its arrays cannot be read");
      at += n * 8;
    };
    read(graph.indptr, h.nodes + 1);
    const int64_t indices_at = at;
    at += h.edges * 8;
    read(graph.labels, h.nodes);
    read(graph.train, h.train);
    read(graph.val, h.val);
    read(graph.test, h.test);
    if (!consistent(graph, h.edges)) throw CacheRejected("its CSR does not describe a graph");
    int index_fd = dup(fd);
    if (index_fd < 0) throw CacheRejected(std::string("cannot duplicate its descriptor (") + std::strerror(errno) + ")");
    graph.index_file = std::make_shared<SampleFile>(index_fd, path, indices_at, h.edges, std::vector<int64_t>{}, torch::kInt64);
    graph.feature_file = std::make_shared<SampleFile>(fd, path, at, h.nodes, std::vector<int64_t>{h.features}, torch::kFloat32);
    return graph;
  } catch (const CacheRejected&) {
    close(fd);
    throw;
  } catch (const std::exception& e) {  // a tensor op on arrays that make no sense
    close(fd);
    throw CacheRejected(std::string("its arrays make no sense (") + e.what() + ")");
  }
}

}  // namespace

Graph load_graph_cached(const std::string& path, const std::string& cache_dir) {
  auto files = graph_source_files(path);
  std::string name = files.empty() ? "" : cache_file_name("graph", files, "ddpgraph");
  std::string sources = files.empty() ? "" : source_identity(files);
  if (cache_dir.empty() || cache_dir == "none" || name.empty() || sources.empty()) return load_graph(path);
  std::string file = cache_dir + "/" + name;
  std::optional<Graph> result, built;
  bool opened = open_or_build_cache(
      file, [&] { return (result = open_graph_cache(file, sources)).has_value(); },
      [&](const std::string& out, mode_t out_mode) { write_graph_cache(out, out_mode, *(built = load_graph(path)), sources); },
      cache_file_mode(files.front()), path);
  if (opened) return *result;
  return built ? *built : load_graph(path);  // a cache that cannot be written: the graph this rank already read
}

}  // namespace ddp
