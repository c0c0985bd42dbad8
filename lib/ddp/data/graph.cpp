#include "ddp/data/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/data/npy_reader.h"

namespace ddp {
namespace {

bool exists(const std::string& path) { return std::filesystem::is_regular_file(path); }

torch::Tensor read_edges_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw FileError("cannot read " + path);
  std::vector<int64_t> values;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte order mark
    if (line.empty()) continue;
    auto fields = split(line, ',');
    for (auto& field : fields) {  // spaces around a cell, as the table reader drops them: "0, 1"
      field.erase(0, field.find_first_not_of(" \t"));
      field.erase(field.find_last_not_of(" \t") + 1);
    }
    auto a = fields.size() == 2 ? parse_int(fields[0]) : std::nullopt;
    auto b = fields.size() == 2 ? parse_int(fields[1]) : std::nullopt;
    if (!a || !b) {
      // A header such as "src,dst": a first line with no digit in it. One with digits ("0,1,2",
      // "7 3", "100;79", "src1,dst2") is a broken edge, or another separator, not a header to drop
      // with the edge it held.
      const bool header =
          number == 1 && std::none_of(line.begin(), line.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
      if (header) continue;
      throw FileError(path + ":" + std::to_string(number) + ": expected two node ids \"src,dst\", got '" +
                      printable(line, 80) + "'" + (number == 1 ? " (a header line holds no digit)" : ""));
    }
    values.push_back(*a);
    values.push_back(*b);
  }
  return torch::tensor(values, torch::kInt64).view({-1, 2}).t().contiguous();
}

// A split as node ids: NAME_idx.npy (ids) or NAME_mask.npy (one flag per node); empty if neither.
torch::Tensor read_split(const std::string& dir, const std::string& name, int64_t num_nodes) {
  std::string ids_path = dir + "/" + name + "_idx.npy", mask_path = dir + "/" + name + "_mask.npy";
  if (exists(ids_path) && exists(mask_path))  // one would be ignored: which the split is cannot be told
    throw FileError("data.path: " + dir + " has both " + name + "_idx.npy and " + name + "_mask.npy; keep one");
  if (exists(ids_path)) {
    auto ids = read_npy(ids_path);
    if (ids.dim() != 1 || !c10::isIntegralType(ids.scalar_type(), false))
      throw FileError(ids_path + ": expected a 1-D array of integer node ids");
    ids = ids.to(torch::kInt64);
    if (ids.numel() > 0 && (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= num_nodes))
      throw FileError(ids_path + ": node ids must be in [0, " + std::to_string(num_nodes) + "), found " +
                      std::to_string(ids.min().item<int64_t>()) + ".." + std::to_string(ids.max().item<int64_t>()));
    return ids;
  }
  if (exists(mask_path)) {
    auto mask = read_npy(mask_path);
    if (mask.dim() != 1 || mask.size(0) != num_nodes)
      throw FileError(mask_path + ": expected one flag per node (" + std::to_string(num_nodes) + "), got shape " +
                      format_shape(mask.sizes().vec()));
    if (const auto odd = (mask.ne(0) & mask.ne(1)).nonzero(); odd.numel() > 0) {  // a mask of 2s is no mask
      const int64_t node = odd[0][0].item<int64_t>();
      throw FileError(mask_path + ": expected flags of 0 or 1 (or bool), found " +
                      fmt::format("{}", mask[node].item<double>()) + " at node " + std::to_string(node));
    }
    return mask.ne(0).nonzero().view(-1);
  }
  return torch::empty({0}, torch::kInt64);
}

// The file that holds split `name` (its ids or its mask); read_split found one of them.
std::string split_file(const std::string& dir, const std::string& name) {
  return exists(dir + "/" + name + "_idx.npy") ? name + "_idx.npy" : name + "_mask.npy";
}

// A node twice in one split is drawn twice an epoch; a node in two splits is evaluated after
// training on it. Either passed without a word, so both are refused, naming the first such node.
void check_disjoint(const std::string& dir, const Graph& graph, int64_t num_nodes) {
  auto owner = torch::full({num_nodes}, -1, torch::kInt8);  // which split holds each node so far
  const std::pair<const torch::Tensor&, const char*> splits[] = {
      {graph.train, "train"}, {graph.val, "val"}, {graph.test, "test"}};
  for (int8_t i = 0; i < 3; ++i) {
    const auto& [ids, name] = splits[i];
    if (ids.numel() == 0) continue;
    const auto sorted = std::get<0>(ids.sort());
    if (const auto repeats = sorted.slice(0, 1).eq(sorted.slice(0, 0, -1)).nonzero(); repeats.numel() > 0)
      throw FileError(dir + "/" + split_file(dir, name) + ": node " +
                      std::to_string(sorted[repeats[0][0]].item<int64_t>()) + " appears more than once (" +
                      std::to_string(repeats.numel()) + " repeats): list each node once");
    const auto before = owner.index({ids});
    if (const auto shared = before.ge(0).nonzero(); shared.numel() > 0) {
      const int64_t first = shared[0][0].item<int64_t>();
      throw FileError("data.path: " + dir + ": node " + std::to_string(ids[first].item<int64_t>()) + " is in both " +
                      split_file(dir, splits[before[first].item<int8_t>()].second) + " and " + split_file(dir, name) +
                      " (" + std::to_string(shared.numel()) + " shared nodes): the splits must not share nodes, or "
                      "evaluation measures nodes the model trained on");
    }
    owner.index_put_({ids}, i);
  }
}

}  // namespace

int64_t Graph::num_classes() const { return labels.numel() == 0 ? 0 : labels.max().item<int64_t>() + 1; }

void Graph::read_indices(int64_t begin, int64_t n, int64_t* out) const {
  if (!index_file) {
    std::copy_n(indices.data_ptr<int64_t>() + begin, n, out);
    return;
  }
  index_file->read_range(begin, n, out);
  // The file changed under us (the sampler indexes indptr with these ids): stop, naming it.
  const int64_t nodes = num_nodes();
  for (int64_t i = 0; i < n; ++i)
    if (out[i] < 0 || out[i] >= nodes)
      throw FileError("the graph cache " + index_file->path() + " holds a neighbour id out of range (" +
                      std::to_string(out[i]) + "); it was changed while in use: delete it to rebuild it");
}

void Graph::read_feature_rows(int64_t first, int64_t n, float* out) const {
  if (feature_file) return feature_file->read_range(first, n, out);
  const int64_t width = features.size(1);
  std::copy_n(features.data_ptr<float>() + first * width, n * width, out);
}

torch::Tensor Graph::feature_rows(const torch::Tensor& nodes) const {
  return feature_file ? feature_file->read(nodes) : features.index_select(0, nodes);
}

void build_csr(Graph& graph, const torch::Tensor& src, const torch::Tensor& dst, const std::string& source) {
  int64_t n = graph.num_nodes();
  for (const auto& [ids, what] : {std::pair{src, "source"}, std::pair{dst, "destination"}})
    if (ids.numel() > 0 && (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= n))
      throw FileError(source + ": an edge's " + what + " node is out of range: ids must be in [0, " +
                      std::to_string(n) + "), found " + std::to_string(ids.min().item<int64_t>()) + ".." +
                      std::to_string(ids.max().item<int64_t>()));
  // A stable sort by destination keeps each node's neighbours in file order (edges already in that
  // order, as Reddit's after coalescing, skip the sort).
  if (dst.numel() < 2 || (dst.slice(0, 1) >= dst.slice(0, 0, -1)).all().item<bool>()) {
    graph.indices = src.contiguous();
  } else {
    auto order = std::get<1>(dst.sort(/*stable=*/c10::optional<bool>(true), /*dim=*/0, /*descending=*/false));
    graph.indices = src.index_select(0, order).contiguous();
  }
  auto counts = torch::bincount(dst, {}, n);
  graph.indptr = torch::cat({torch::zeros({1}, torch::kInt64), counts.cumsum(0)}).contiguous();
}

torch::Tensor node_features(const torch::Tensor& features, const std::string& source) {
  if (features.dim() != 2 || !features.is_floating_point())
    throw FileError(source + ": expected a float array [nodes, features], got " + format_shape(features.sizes().vec()) +
                    " of " + std::string(c10::toString(features.scalar_type())));
  // Zero columns built a cache that could not be opened, then failed in GraphSAGE's initialisation.
  if (features.size(1) == 0)
    throw FileError(source + ": no feature columns (shape " + format_shape(features.sizes().vec()) +
                    "): a node needs at least one feature");
  torch::Tensor converted = features.to(torch::kFloat32).contiguous();
  // Non-finite features evaluate to NaN with exit 0, or train to a loss blamed on optim.lr: refused
  // here, the first named, as dataset_splits.cpp refuses them in samples. In chunks of rows.
  constexpr int64_t kChunk = 4096;
  for (int64_t start = 0; start < converted.size(0); start += kChunk) {
    auto rows = converted.narrow(0, start, std::min(kChunk, converted.size(0) - start));
    auto hit = torch::logical_not(torch::isfinite(rows)).nonzero();
    if (hit.numel() == 0) continue;
    const int64_t row = hit[0][0].item<int64_t>(), column = hit[0][1].item<int64_t>();
    const bool nan = std::isnan(rows[row][column].item<float>());
    throw FileError(source + ": feature " + std::to_string(column) + " of node " + std::to_string(start + row) +
                    " is " + (nan ? "NaN" : "infinite (as float32)") +
                    "; training needs finite features (fix that node's)");
  }
  return converted;
}

Graph load_graph_directory(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) throw FileError("data.path: no graph directory " + dir);
  Graph graph;
  std::string features_path = dir + "/features.npy", labels_path = dir + "/labels.npy";
  graph.features = node_features(read_npy(features_path), features_path);
  int64_t n = graph.num_nodes();
  graph.labels = read_npy(labels_path);
  if (graph.labels.dim() == 1 && graph.labels.size(0) != n && c10::isIntegralType(graph.labels.scalar_type(), false))
    throw FileError(labels_path + " has " + std::to_string(graph.labels.size(0)) + " labels, but " + features_path +
                    " has " + std::to_string(n) + " rows: one of each per node");
  if (graph.labels.dim() != 1 || graph.labels.size(0) != n || !c10::isIntegralType(graph.labels.scalar_type(), false))
    throw FileError(labels_path + ": expected one integer label per node (" + std::to_string(n) + "), got " +
                    format_shape(graph.labels.sizes().vec()) + " of " + c10::toString(graph.labels.scalar_type()));
  graph.labels = graph.labels.to(torch::kInt64);
  if (graph.labels.numel() > 0 && graph.labels.min().item<int64_t>() < 0)
    throw FileError(labels_path + ": labels must be >= 0");

  std::string edges_npy = dir + "/edge_index.npy", edges_csv = dir + "/edges.csv";
  torch::Tensor edges;
  std::string source;
  if (exists(edges_npy) && exists(edges_csv))  // one would be ignored: which the graph is cannot be told
    throw FileError("data.path: " + dir + " has both edge_index.npy and edges.csv; keep one");
  if (exists(edges_npy)) {
    edges = read_npy(source = edges_npy);
    if (edges.dim() != 2 || edges.size(0) != 2 || !c10::isIntegralType(edges.scalar_type(), false))
      throw FileError(edges_npy + ": expected integer node ids [2, edges], got " + format_shape(edges.sizes().vec()) +
                      " of " + std::string(c10::toString(edges.scalar_type())));
    edges = edges.to(torch::kInt64);
  } else if (exists(edges_csv)) {
    edges = read_edges_csv(source = edges_csv);
  } else {
    throw FileError("data.path: " + dir + " has no edges (edge_index.npy or edges.csv)");
  }
  // No edge at all is an empty or header-only file, not a graph: each node would be aggregated
  // alone, GraphSAGE an MLP, with no word.
  if (edges.size(1) == 0) throw FileError(source + ": no edges; a graph needs at least one");
  build_csr(graph, edges[0].contiguous(), edges[1].contiguous(), source);
  graph.train = read_split(dir, "train", n);
  graph.val = read_split(dir, "val", n);
  graph.test = read_split(dir, "test", n);
  if (graph.train.numel() == 0) throw FileError("data.path: " + dir + " has no training nodes (train_idx.npy or train_mask.npy)");
  check_disjoint(dir, graph, n);
  return graph;
}

std::vector<std::string> graph_directory_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& name : {"features.npy", "labels.npy", "edge_index.npy", "edges.csv", "train_idx.npy", "train_mask.npy",
                           "val_idx.npy", "val_mask.npy", "test_idx.npy", "test_mask.npy"})
    if (exists(dir + "/" + name)) files.push_back(dir + "/" + name);
  return files;
}

}  // namespace ddp
