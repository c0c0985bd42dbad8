#include "ddp/data/reddit_graph.h"

#include <algorithm>
#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/data/npz_reader.h"

namespace ddp {
namespace {

std::string shape_text(const torch::Tensor& t) { return format_shape(t.sizes().vec()); }

torch::Tensor integer_member(const NpzFile& file, const std::string& name, int64_t dims) {
  auto array = file.read(name);
  if (array.dim() != dims || !c10::isIntegralType(array.scalar_type(), false))
    throw FileError(file.path() + ": '" + name + "' must be a " + std::to_string(dims) + "-D integer array, got " +
                    shape_text(array) + " of " + c10::toString(array.scalar_type()));
  return array.to(torch::kInt64);
}

// The text of a 0-d bytes array as np.save writes it (scipy's `format`): what follows the header,
// without numpy's NUL padding.
std::string npy_bytes_value(const std::string& npy) {
  if (npy.size() < 12 || npy.compare(0, 6, "\x93NUMPY") != 0) return "";
  const bool v1 = npy[6] == 1;
  std::size_t length = static_cast<unsigned char>(npy[8]) | static_cast<unsigned char>(npy[9]) << 8;
  if (!v1) length |= static_cast<std::size_t>(static_cast<unsigned char>(npy[10])) << 16 |
                     static_cast<std::size_t>(static_cast<unsigned char>(npy[11])) << 24;
  const std::size_t start = (v1 ? 10 : 12) + length;
  if (start > npy.size()) return "";
  std::string value = npy.substr(start);
  return value.substr(0, value.find('\0'));
}

// The sparse matrix's edges (row → column) and its shape, from scipy's save_npz members.
std::pair<torch::Tensor, torch::Tensor> read_sparse_edges(const NpzFile& file, int64_t num_nodes) {
  std::string format = file.contains("format") ? npy_bytes_value(file.read_bytes("format")) : "";
  auto shape = integer_member(file, "shape", 1);
  if (shape.numel() != 2 || shape[0].item<int64_t>() != num_nodes || shape[1].item<int64_t>() != num_nodes)
    throw FileError(file.path() + ": the matrix's shape " +
                    format_shape(std::vector<int64_t>(shape.data_ptr<int64_t>(), shape.data_ptr<int64_t>() + shape.numel())) +
                    " holds " +
                    std::to_string(shape.numel() ? shape[0].item<int64_t>() : 0) + " nodes, reddit_data.npz has " +
                    std::to_string(num_nodes) + " ([" + std::to_string(num_nodes) + ", " + std::to_string(num_nodes) + "] expected)");
  if (format == "coo" || (format.empty() && file.contains("row"))) {
    auto row = integer_member(file, "row", 1), col = integer_member(file, "col", 1);
    if (row.numel() != col.numel())
      throw FileError(file.path() + ": 'row' has " + std::to_string(row.numel()) + " entries and 'col' " +
                      std::to_string(col.numel()) + "; a COO matrix has one of each per edge");
    return {row, col};
  }
  if (format == "csr") {
    auto indptr = integer_member(file, "indptr", 1), col = integer_member(file, "indices", 1);
    if (indptr.numel() != num_nodes + 1 || indptr[0].item<int64_t>() != 0 || indptr[-1].item<int64_t>() != col.numel() ||
        (indptr.numel() > 1 && (indptr.diff() < 0).any().item<bool>()))
      throw FileError(file.path() + ": its CSR 'indptr' does not describe its " + std::to_string(col.numel()) + " 'indices'");
    auto row = torch::repeat_interleave(torch::arange(num_nodes, torch::kInt64), indptr.diff());
    return {row, col};
  }
  throw FileError(file.path() + ": holds a sparse matrix in format '" + printable(format, 20) +
                  "'; COO (as PyG's file) or CSR is read (save it with scipy.sparse.save_npz(path, matrix.tocoo()))");
}

}  // namespace

bool is_reddit_directory(const std::string& dir) { return std::filesystem::is_regular_file(dir + "/reddit_data.npz"); }

Graph load_reddit_graph(const std::string& dir) {
  NpzFile data(dir + "/reddit_data.npz");
  Graph graph;
  graph.features = node_features(data.read("feature"), data.path() + ": 'feature'");
  const int64_t n = graph.features.size(0);
  graph.labels = integer_member(data, "label", 1);
  auto types = integer_member(data, "node_types", 1);
  for (const auto& [array, name] : {std::pair{graph.labels, "label"}, std::pair{types, "node_types"}})
    if (array.numel() != n)
      throw FileError(data.path() + ": '" + name + "' has " + std::to_string(array.numel()) + " entries, 'feature' " +
                      std::to_string(n) + " nodes (one per node expected)");
  if (n > 0 && graph.labels.min().item<int64_t>() < 0) throw FileError(data.path() + ": 'label' must be >= 0");
  if (n > 0 && (types.min().item<int64_t>() < 1 || types.max().item<int64_t>() > 3))
    throw FileError(data.path() + ": 'node_types' must be 1 (train), 2 (val) or 3 (test), found " +
                    std::to_string(types.min().item<int64_t>()) + ".." + std::to_string(types.max().item<int64_t>()));
  graph.train = types.eq(1).nonzero().view(-1);
  graph.val = types.eq(2).nonzero().view(-1);
  graph.test = types.eq(3).nonzero().view(-1);

  NpzFile matrix(dir + "/reddit_graph.npz");
  auto [src, dst] = read_sparse_edges(matrix, n);
  for (const auto& ids : {src, dst})
    if (ids.numel() > 0 && (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= n))
      throw FileError(matrix.path() + ": an edge's node is out of range: ids must be in [0, " + std::to_string(n) +
                      "), found " + std::to_string(ids.min().item<int64_t>()) + ".." + std::to_string(ids.max().item<int64_t>()));
  // Merge duplicates as PyG's coalesce does: one key per (destination, source), sorted and made
  // unique in place, then turned into the CSR's sources in place: 114.6M edges cost one int64 array.
  auto keys = dst.mul_(n).add_(src);
  src = dst = torch::Tensor();
  int64_t* key = keys.data_ptr<int64_t>();
  std::sort(key, key + keys.numel());
  const int64_t edges = std::unique(key, key + keys.numel()) - key;
  auto counts = torch::zeros({n}, torch::kInt64);
  int64_t* count = counts.data_ptr<int64_t>();
  for (int64_t e = 0; e < edges; ++e) {
    ++count[key[e] / n];
    key[e] %= n;
  }
  graph.indices = keys.narrow(0, 0, edges);
  graph.indptr = torch::cat({torch::zeros({1}, torch::kInt64), counts.cumsum(0)});
  if (graph.train.numel() == 0) throw FileError(data.path() + ": no node has node_types 1 (train)");
  return graph;
}

std::vector<std::string> reddit_graph_files(const std::string& dir) {
  return {dir + "/reddit_data.npz", dir + "/reddit_graph.npz"};
}

}  // namespace ddp
