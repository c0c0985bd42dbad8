// PyG's Reddit files and the .npz reader, on files that numpy and scipy write (np.savez,
// np.savez_compressed, scipy.sparse.save_npz as COO and CSR) and on broken ones; and the graph
// cache: one file per node, read on demand, giving what the source gives.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "ddp/common/error.h"
#include "ddp/data/graph_cache.h"
#include "ddp/data/load_graph.h"
#include "ddp/data/neighbor_sampler.h"
#include "ddp/data/npz_reader.h"
#include "ddp/data/reddit_graph.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using Catch::Contains;

namespace {

// Writes a small Reddit-layout graph with numpy and scipy into `dir`; `variant` picks how it is
// written or broken. Returns false (and says why) when Debian's python3-scipy is missing.
bool write_reddit(const std::string& dir, const std::string& variant) {
  static const char* kScript = R"(
import os, sys, zipfile
import numpy as np, scipy.sparse as sp
out, variant = sys.argv[1], sys.argv[2]
if variant == "zip64": zipfile.ZIP64_LIMIT = 16  # every entry's sizes and offset in zip64 extra fields
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(3)
n = 50
feature = rng.standard_normal((n, 6)).astype(np.float32)
label = rng.integers(0, 4, n)
node_types = np.array([1, 1, 2, 3, 1] * 10)
row = rng.integers(0, n, 400).astype(np.int32)
col = rng.integers(0, n, 400).astype(np.int32)
row[:3], col[:3] = 7, 9   # a repeated edge, merged as PyG's coalesce does
plain_label = label
if variant == "sizes": label = label[:40]
if variant == "types": node_types[5] = 4
save = np.savez_compressed if variant in ("compressed", "csr") else np.savez
data = dict(feature=feature, label=label, node_types=node_types)
if variant == "missing": del data["node_types"]
save(f"{out}/reddit_data.npz", **data)
coo = sp.coo_matrix((np.ones(400), (row, col)), shape=(n, n))
if variant == "range":  # scipy refuses such a matrix, so write the members save_npz would
  bad = row.copy(); bad[10] = n
  np.savez(f"{out}/reddit_graph.npz", row=bad, col=col, data=np.ones(400), format=np.array(b"coo"), shape=np.array((n, n)))
elif variant == "csr": sp.save_npz(f"{out}/reddit_graph.npz", sp.csr_matrix((np.ones(400), (row, col)), shape=(n, n)))
else: sp.save_npz(f"{out}/reddit_graph.npz", coo, compressed=(variant == "compressed"))
# The same graph as a plain directory beside it (OUT_plain), for comparison.
plain = out + "_plain"
os.makedirs(plain, exist_ok=True)
keys = np.unique(col.astype(np.int64) * n + row)
np.save(f"{plain}/edge_index.npy", np.stack([keys % n, keys // n]))
np.save(f"{plain}/features.npy", feature); np.save(f"{plain}/labels.npy", plain_label)
for name, t in (("train", 1), ("val", 2), ("test", 3)): np.save(f"{plain}/{name}_idx.npy", np.nonzero(node_types == t)[0])
)";
  auto r = test::run_command({"/usr/bin/python3", "-c", kScript, dir, variant}, std::chrono::seconds(60));
  if (r.exit_code != 0 && r.err.find("No module named 'scipy'") != std::string::npos) {
    WARN("skipped: /usr/bin/python3 has no scipy (Debian's python3-scipy; scripts/setup.sh installs it)");
    return false;
  }
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  return true;
}

// The same graph from the Reddit files and from the plain directory beside them.
void check_same_graph(const Graph& reddit, const std::string& dir) {
  Graph plain = load_graph_directory(dir + "_plain");
  CHECK(reddit.num_nodes() == 50);
  CHECK(torch::equal(reddit.indptr, plain.indptr));
  CHECK(torch::equal(reddit.indices, plain.indices));
  CHECK(torch::equal(reddit.features, plain.features));
  CHECK(torch::equal(reddit.labels, plain.labels));
  CHECK(torch::equal(reddit.train, plain.train));
  CHECK(torch::equal(reddit.val, plain.val));
  CHECK(torch::equal(reddit.test, plain.test));
}

}  // namespace

TEST_CASE("PyG's Reddit files load as numpy and scipy write them: savez, savez_compressed, COO and CSR", "[graph][data][python]") {
  for (const auto& variant : {"plain", "compressed", "csr", "zip64"}) {
    INFO(variant);
    test::TempDir dir;
    std::string d = dir.file(variant);
    if (!write_reddit(d, variant)) return;
    REQUIRE(is_reddit_directory(d));
    Graph g = load_graph(d);
    CHECK(g.num_edges() < 400);  // the repeats merged
    check_same_graph(g, d);
  }
  // Both forms in one directory: one would be ignored without a word.
  test::TempDir dir;
  const std::string d = dir.file("both");
  if (!write_reddit(d, "plain")) return;
  std::filesystem::copy_file(d + "_plain/features.npy", d + "/features.npy");
  CHECK_THROWS_WITH(load_graph(d), Contains("data.path: " + d +
                                            " holds both PyG's Reddit files (reddit_data.npz) "
                                            "and a graph directory's (features.npy)"));
  CHECK_THROWS_WITH(graph_source_files(d), Contains("keep one form"));
}

TEST_CASE("broken Reddit files are named with their cause", "[graph][data][python]") {
  auto refused = [](const std::string& variant, const std::string& cause) {
    INFO(variant);
    test::TempDir dir;
    std::string d = dir.file(variant);
    if (!write_reddit(d, variant)) return;
    CHECK_THROWS_AS(load_reddit_graph(d), FileError);
    CHECK_THROWS_WITH(load_reddit_graph(d), Contains(cause));
  };
  refused("missing", "reddit_data.npz: has no array 'node_types' (it holds: feature, label)");
  refused("sizes", "reddit_data.npz: 'label' has 40 entries, 'feature' 50 nodes");
  refused("types", "reddit_data.npz: 'node_types' must be 1 (train), 2 (val) or 3 (test), found 1..4");
  refused("range", "reddit_graph.npz: an edge's node is out of range: ids must be in [0, 50), found 0..50");
}

TEST_CASE("an npz cut short, corrupted, or not a zip is an error naming the file", "[graph][data][python]") {
  test::TempDir dir;
  std::string d = dir.file("r");
  if (!write_reddit(d, "plain")) return;
  std::string good = test::read_file(d + "/reddit_data.npz");
  auto write = [&](const std::string& bytes) {
    test::write_file(d + "/reddit_data.npz", bytes);
  };
  write(good.substr(0, good.size() / 2));
  CHECK_THROWS_WITH(load_reddit_graph(d), Contains("reddit_data.npz: is not an .npz file (no zip directory; cut short"));
  // A byte of the stored features flipped: the member's CRC-32 no longer matches.
  std::string flipped = good;
  flipped[flipped.find("\x93NUMPY") + 200] ^= 0x40;
  write(flipped);
  CHECK_THROWS_WITH(load_reddit_graph(d), Contains("reddit_data.npz (member feature.npy): is corrupt (CRC-32 mismatch)"));
  write("just text, no zip here");
  CHECK_THROWS_WITH(load_reddit_graph(d), Contains("reddit_data.npz: is not an .npz file"));
  // The end record's directory offset pointing far past the end (no comment: it is the last 22 bytes).
  std::string far = good;
  for (std::size_t i = far.size() - 6; i < far.size() - 2; ++i) far[i] = static_cast<char>(0xf0);
  write(far);
  CHECK_THROWS_WITH(load_reddit_graph(d), Contains("reddit_data.npz: is cut short (its zip directory points past the end)"));
  // A deflated member whose compressed bytes are damaged.
  std::string c = dir.file("c");
  if (!write_reddit(c, "compressed")) return;
  std::string packed = test::read_file(c + "/reddit_graph.npz");
  for (std::size_t i = 60; i < 160; ++i) packed[i] = static_cast<char>(0xff);
  test::write_file(c + "/reddit_graph.npz", packed);
  CHECK_THROWS_AS(load_reddit_graph(c), FileError);
  CHECK_THROWS_WITH(load_reddit_graph(c), Contains("reddit_graph.npz"));
}

TEST_CASE("a zip64 extra field that claims more than its entry holds is refused, not read past", "[graph][data][python]") {
  test::TempDir dir;
  std::string d = dir.file("z");
  if (!write_reddit(d, "zip64")) return;
  std::string bytes = test::read_file(d + "/reddit_data.npz");
  // The last central directory entry: its first extra field's length set to 0xffff.
  auto entry = bytes.rfind(std::string("PK\x01\x02", 4));
  REQUIRE(entry != std::string::npos);
  auto name_size = static_cast<unsigned char>(bytes[entry + 28]) | static_cast<unsigned char>(bytes[entry + 29]) << 8;
  REQUIRE((static_cast<unsigned char>(bytes[entry + 30]) | static_cast<unsigned char>(bytes[entry + 31]) << 8) > 0);
  bytes[entry + 46 + name_size + 2] = bytes[entry + 46 + name_size + 3] = static_cast<char>(0xff);
  test::write_file(d + "/reddit_data.npz", bytes);
  CHECK_THROWS_WITH(load_reddit_graph(d), Contains("reddit_data.npz: its zip directory is corrupt (an extra field runs past its entry)"));
}

TEST_CASE("the graph cache is written once and gives the source's graph, read on demand", "[graph][data][python]") {
  test::TempDir dir;
  std::string d = dir.file("r"), cache = dir.file("cache");
  if (!write_reddit(d, "compressed")) return;
  Graph memory = load_graph(d);
  Graph cached = load_graph_cached(d, cache);
  REQUIRE(cached.feature_file);  // read from the cache file, not held in memory
  REQUIRE(cached.index_file);
  CHECK_FALSE(cached.features.defined());
  auto files = std::distance(std::filesystem::directory_iterator(cache), {});
  Graph again = load_graph_cached(d, cache);  // opens the same file
  CHECK(std::distance(std::filesystem::directory_iterator(cache), {}) == files);
  for (const Graph* g : {&cached, &again}) {
    CHECK(torch::equal(g->indptr, memory.indptr));
    CHECK(torch::equal(g->labels, memory.labels));
    CHECK(torch::equal(g->train, memory.train));
    auto all = torch::arange(memory.num_nodes(), torch::kInt64);
    CHECK(torch::equal(g->feature_rows(all), memory.features));
    auto seeds = torch::tensor({0, 4, 7, 9}, torch::kInt64);
    auto a = sample_subgraph(*g, seeds, {3, 2}, {5, 1}), b = sample_subgraph(memory, seeds, {3, 2}, {5, 1});
    CHECK(torch::equal(a.nodes, b.nodes));
    CHECK(torch::equal(a.blocks[0].src, b.blocks[0].src));
  }
  CHECK(load_graph_cached(d, "none").features.defined());  // no cache: in memory

  // A cache file cut short, or whose CSR was damaged, is rebuilt rather than trusted.
  std::string file;  // beside it: its lock and its record of verification
  for (const auto& entry : std::filesystem::directory_iterator(cache))
    if (entry.path().extension() == ".ddpgraph") file = entry.path();
  REQUIRE(!file.empty());
  const auto size = std::filesystem::file_size(file);
  std::filesystem::resize_file(file, size - 8);
  CHECK(torch::equal(load_graph_cached(d, cache).indptr, memory.indptr));
  CHECK(std::filesystem::file_size(file) == size);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(56 + 8 * 10);  // indptr[10], after the 56-byte header
    f.write("\xff\xff\xff\xff\xff\xff\xff\x7f", 8);
  }
  Graph rebuilt = load_graph_cached(d, cache);
  CHECK(torch::equal(rebuilt.indptr, memory.indptr));
  CHECK(torch::equal(rebuilt.feature_rows(torch::arange(memory.num_nodes(), torch::kInt64)), memory.features));
}

TEST_CASE("each kind of broken Reddit file or npz member is refused with its own cause", "[graph][data][python]") {
  // One Python run writes every variant: each is the good graph with one thing wrong.
  static const char* kScript = R"(
import io, os, sys, zipfile
import numpy as np
out = sys.argv[1]
rng = np.random.default_rng(1)
n = 20
good = dict(feature=rng.standard_normal((n, 3)).astype(np.float32), label=rng.integers(0, 2, n), node_types=np.array([1, 2, 3, 1] * 5))
row, col = rng.integers(0, n, 60).astype(np.int32), rng.integers(0, n, 60).astype(np.int32)
coo = dict(row=row, col=col, data=np.ones(60), format=np.array(b"coo"), shape=np.array((n, n)))
def write(name, data=good, graph=coo):
  os.makedirs(f"{out}/{name}")
  np.savez(f"{out}/{name}/reddit_data.npz", **data)
  np.savez(f"{out}/{name}/reddit_graph.npz", **graph)
write("feature_int", dict(good, feature=np.zeros((n, 3), np.int64)))
inf = good["feature"].copy(); inf[5, 2] = np.inf
write("feature_inf", dict(good, feature=inf))
write("label_2d", dict(good, label=np.zeros((n, 2), np.int64)))
write("negative_label", dict(good, label=-np.ones(n, np.int64)))
write("no_train", dict(good, node_types=np.full(n, 2)))
write("shape", graph=dict(coo, shape=np.array((n + 1, n + 1))))
write("row_col", graph=dict(coo, row=row[:59]))
write("csr_indptr", graph=dict(indptr=np.array([2] + [60] * n), indices=col, data=np.ones(60), format=np.array(b"csr"), shape=np.array((n, n))))
write("bsr", graph=dict(coo, format=np.array(b"bsr")))
write("bzip2")
with zipfile.ZipFile(f"{out}/bzip2/reddit_data.npz", "w", compression=zipfile.ZIP_BZIP2) as z:
  for k, v in good.items():
    b = io.BytesIO(); np.save(b, v); z.writestr(k + ".npy", b.getvalue())
write("trailing")
with zipfile.ZipFile(f"{out}/trailing/reddit_data.npz", "w") as z:
  for k, v in good.items():
    b = io.BytesIO(); np.save(b, v); z.writestr(k + ".npy", b.getvalue() + (b"xx" if k == "label" else b""))
)";
  test::TempDir dir;
  auto r = test::run_command({"/usr/bin/python3", "-c", kScript, dir.path()}, std::chrono::seconds(60));
  if (r.exit_code != 0 && r.err.find("No module named") != std::string::npos) {
    WARN("skipped: /usr/bin/python3 has no numpy (Debian's python3-numpy, with python3-torch)");
    return;
  }
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto refused = [&](const std::string& variant, const std::string& cause) {
    INFO(variant);
    CHECK_THROWS_AS(load_reddit_graph(dir.file(variant)), FileError);
    CHECK_THROWS_WITH(load_reddit_graph(dir.file(variant)), Contains(cause));
  };
  refused("feature_int", "reddit_data.npz: 'feature': expected a float array [nodes, features], got [20, 3] of Long");
  refused("feature_inf", "reddit_data.npz: 'feature': feature 2 of node 5 is infinite (as float32); training needs "
                         "finite features (fix that node's)");
  refused("label_2d", "reddit_data.npz: 'label' must be a 1-D integer array, got [20, 2]");
  refused("negative_label", "reddit_data.npz: 'label' must be >= 0");
  refused("no_train", "reddit_data.npz: no node has node_types 1 (train)");
  refused("shape", "reddit_graph.npz: the matrix's shape [21, 21] holds 21 nodes, reddit_data.npz has 20 ([20, 20] expected)");
  refused("row_col", "reddit_graph.npz: 'row' has 59 entries and 'col' 60");
  refused("csr_indptr", "reddit_graph.npz: its CSR 'indptr' does not describe its 60 'indices'");
  refused("bsr", "reddit_graph.npz: holds a sparse matrix in format 'bsr'");
  refused("bzip2", "reddit_data.npz: member feature.npy uses zip compression method 12 (stored or deflated are read");
  refused("trailing", "reddit_data.npz (member label.npy): has 2 bytes after the array its header describes");
}

TEST_CASE("a damaged zip directory or entry header is refused, naming the file", "[graph][data][python]") {
  test::TempDir dir;
  std::string d = dir.file("r");
  if (!write_reddit(d, "plain")) return;
  std::string good = test::read_file(d + "/reddit_data.npz");
  const auto entry = good.find(std::string("PK\x01\x02", 4));  // the first member's directory entry
  REQUIRE(entry != std::string::npos);
  auto put32 = [](std::string& bytes, std::size_t at, uint32_t value) {
    for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>(value >> (8 * i));
  };
  auto refused = [&](std::string bytes, const std::string& cause) {
    INFO(cause);
    test::write_file(d + "/reddit_data.npz", bytes);
    CHECK_THROWS_AS(load_reddit_graph(d), FileError);
    CHECK_THROWS_WITH(load_reddit_graph(d), Contains(cause));
  };
  std::string b = good;
  put32(b, entry + 24, 12345);  // the stored member's size, no longer its stored bytes
  refused(b, "reddit_data.npz: member feature.npy claims 12345 bytes from");
  b = good;
  put32(b, entry + 42, static_cast<uint32_t>(good.size() - 10));  // its entry header near the end of the file
  refused(b, "reddit_data.npz: is cut short (member feature.npy runs past the end of the file)");
  b = good;
  b[entry + 8] |= 1;  // the encrypted flag
  refused(b, "reddit_data.npz: member feature.npy is encrypted");
  b = good;
  b[entry] = 'X';
  refused(b, "reddit_data.npz: its zip directory is corrupt");
  b = good;
  b[0] = 'X';  // the first member's own header
  refused(b, "reddit_data.npz (member feature.npy): the zip entry header is corrupt");
}

TEST_CASE("a graph cache file changed while in use stops the sampler, naming it", "[graph][data][python]") {
  test::TempDir dir;
  std::string d = dir.file("r"), cache = dir.file("cache");
  if (!write_reddit(d, "plain")) return;
  Graph g = load_graph_cached(d, cache);
  REQUIRE(g.index_file);
  {  // the first neighbour id, just after the 56-byte header and indptr
    std::fstream f(g.index_file->path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(56 + 8 * (g.num_nodes() + 1));
    f.write("\xff\xff\xff\x7f\x00\x00\x00\x00", 8);
  }
  int64_t first = 0;
  while (g.indptr[first + 1].item<int64_t>() == 0) ++first;  // the node whose list holds position 0
  CHECK_THROWS_WITH(sample_subgraph(g, torch::tensor({first}, torch::kInt64), {-1}, {0, 0}),
                    Contains("the graph cache " + g.index_file->path() + " holds a neighbour id out of range (2147483647)"));
  // Cut short while in use: the features at its end can no longer be read.
  // The features end where the seal begins: after the 56-byte header and the int64 arrays.
  const int64_t n = g.num_nodes(), features_end = 56 + 8 * (n + 1 + g.num_edges() + n + g.train.numel() +
                                                           g.val.numel() + g.test.numel()) + 4 * n * g.num_features();
  std::filesystem::resize_file(g.feature_file->path(), static_cast<std::uintmax_t>(features_end - 100));
  std::vector<float> rows(static_cast<std::size_t>(2 * g.num_features()));
  CHECK_THROWS_WITH(g.read_feature_rows(g.num_nodes() - 2, 2, rows.data()),
                    Contains(g.feature_file->path() + ": cannot read samples 48..49 (the file was cut short while in use)"));
}

}  // namespace DDP_TEST_FILE
