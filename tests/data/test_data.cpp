// Data pipeline: IDX reading (real Fashion-MNIST and broken files), the synthetic dataset,
// DistributedSampler (including index-for-index parity with PyTorch), batch gathering, eval shards.

#include "ddp/common/error.h"
#include "ddp/data/batch.h"
#include "ddp/data/distributed_sampler.h"
#include "ddp/data/idx_reader.h"
#include "ddp/data/synthetic_dataset.h"
#include "support/subprocess.h"

#include <torch/types.h>
#include <zlib.h>

#include <filesystem>
#include <iterator>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

// LibTorch's headers pull in glog, whose CHECK(cond) would shadow Catch's; Catch must come last.
#include <catch2/catch.hpp>

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;
using ddp::test::TempDir;
using ddp::test::write_file;

namespace {

const std::string kFashionDir = "/usr/share/datasets/fashion-mnist";

// Both checks: the type, and that the message names the file and the cause.
#define REQUIRE_FILE_ERROR(expr, matcher)       \
  do {                                          \
    REQUIRE_THROWS_AS(expr, ddp::FileError);    \
    REQUIRE_THROWS_WITH(expr, matcher);         \
  } while (0)

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

/// An IDX file: magic 00 00 type ndim, big-endian dims, then `payload`.
std::string idx_bytes(unsigned char type, const std::vector<uint32_t>& dims, const std::string& payload) {
  std::string out{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) out += be32(d);
  return out + payload;
}

/// A well-formed uint8 IDX file with `count` bytes of data 0, 1, 2, ...
std::string idx_u8(const std::vector<uint32_t>& dims) {
  size_t count = 1;
  for (uint32_t d : dims) count *= d;
  std::string payload(count, '\0');
  for (size_t i = 0; i < count; ++i) payload[i] = static_cast<char>(i % 251);
  return idx_bytes(0x08, dims, payload);
}

std::string gzip(const std::string& data) {
  z_stream s{};
  REQUIRE(deflateInit2(&s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&s, data.size()), '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  s.avail_in = static_cast<uInt>(data.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&s, Z_FINISH) == Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

/// Decompresses with zlib's own reader, independent of read_idx.
void gunzip_file(const std::string& from, const std::string& to) {
  gzFile in = gzopen(from.c_str(), "rb");
  REQUIRE(in != nullptr);
  std::string data;
  std::vector<char> buffer(1 << 20);
  int got;
  while ((got = gzread(in, buffer.data(), static_cast<unsigned>(buffer.size()))) > 0) data.append(buffer.data(), got);
  REQUIRE(got == 0);
  gzclose(in);
  write_file(to, data);
}

std::vector<int64_t> to_vector(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

std::vector<std::vector<int64_t>> all_ranks(int64_t n, int64_t replicas, const ddp::SamplerConfig& config,
                                            int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t rank = 0; rank < replicas; ++rank) {
    ddp::DistributedSampler sampler(n, replicas, rank, config);
    sampler.set_epoch(epoch);
    out.push_back(to_vector(sampler.indices()));
  }
  return out;
}

ddp::SamplerConfig sampler_config(bool shuffle, int64_t seed, bool drop_last) {
  ddp::SamplerConfig config;
  config.shuffle = shuffle;
  config.seed = seed;
  config.drop_last = drop_last;
  return config;
}

}  // namespace

TEST_CASE("read_idx reads the real Fashion-MNIST files, gzip and raw alike", "[data][idx]") {
  REQUIRE(std::filesystem::is_directory(kFashionDir));
  ddp::Dataset train = ddp::load_idx_split(kFashionDir, "train");
  CHECK(train.features.sizes() == torch::IntArrayRef({60000, 1, 28, 28}));
  CHECK(train.features.scalar_type() == torch::kUInt8);
  CHECK(train.labels.sizes() == torch::IntArrayRef({60000}));
  CHECK(train.labels.scalar_type() == torch::kLong);
  CHECK(train.size() == 60000);
  CHECK(train.labels.min().item<int64_t>() == 0);
  CHECK(train.labels.max().item<int64_t>() == 9);
  // Fashion-MNIST's training split has exactly 6,000 of each class.
  CHECK(torch::equal(train.labels.bincount(), torch::full({10}, 6000, torch::kLong)));
  CHECK(train.features.max().item<int64_t>() == 255);

  ddp::Dataset test = ddp::load_idx_split(kFashionDir, "test");
  CHECK(test.features.sizes() == torch::IntArrayRef({10000, 1, 28, 28}));
  CHECK(test.size() == 10000);
  CHECK(test.labels.max().item<int64_t>() == 9);

  SECTION("a gunzipped copy reads identically (detected by content, not name)") {
    TempDir dir;
    for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"}) {
      gunzip_file(kFashionDir + "/" + name + ".gz", dir.file(name));
    }
    ddp::Dataset raw = ddp::load_idx_split(dir.path(), "train");
    CHECK(torch::equal(raw.features, train.features));
    CHECK(torch::equal(raw.labels, train.labels));

    // A raw file misnamed .gz and a gzip file without the suffix both still read.
    std::filesystem::rename(dir.file("train-labels-idx1-ubyte"), dir.file("odd.gz"));
    CHECK(torch::equal(ddp::read_idx(dir.file("odd.gz")).to(torch::kLong), train.labels));
    std::filesystem::copy_file(kFashionDir + "/t10k-labels-idx1-ubyte.gz", dir.file("plain"));
    CHECK(torch::equal(ddp::read_idx(dir.file("plain")).to(torch::kLong), test.labels));
  }
}

TEST_CASE("read_idx reads small files of any rank", "[data][idx]") {
  TempDir dir;
  write_file(dir.file("a"), idx_u8({3, 2, 4}));
  torch::Tensor a = ddp::read_idx(dir.file("a"));
  CHECK(a.sizes() == torch::IntArrayRef({3, 2, 4}));
  CHECK(a[2][1][3].item<int64_t>() == 23);
  write_file(dir.file("b.gz"), gzip(idx_u8({5})) + gzip(""));  // a second, empty gzip member is legal
  CHECK(torch::equal(ddp::read_idx(dir.file("b.gz")), torch::arange(5, torch::kUInt8)));
  write_file(dir.file("empty"), idx_u8({0, 28, 28}));
  CHECK(ddp::read_idx(dir.file("empty")).sizes() == torch::IntArrayRef({0, 28, 28}));
}

TEST_CASE("read_idx names the file and the cause of every failure", "[data][idx]") {
  TempDir dir;
  const std::string path = dir.file("data");

  SECTION("missing") {
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path) && Contains("cannot open") && Contains("No such file"));
  }
  SECTION("a directory") {
    REQUIRE_FILE_ERROR(ddp::read_idx(dir.path()), Contains(dir.path()) && Contains("directory"));
  }
  SECTION("empty") {
    write_file(path, "");
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path) && Contains("not an IDX file") && Contains("empty"));
  }
  SECTION("wrong magic, e.g. a zip") {
    write_file(path, std::string("PK\x03\x04", 4) + std::string(100, 'x'));
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path) && Contains("not an IDX file") && Contains("50 4b 03 04"));
  }
  SECTION("unsupported element type") {
    write_file(path, idx_bytes(0x0C, {2}, std::string(8, '\0')));
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path) && Contains("unsupported IDX element type 0x0c"));
  }
  SECTION("unknown element type") {
    write_file(path, idx_bytes(0x07, {2}, "ab"));
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path) && Contains("unknown element type 0x07"));
  }
  SECTION("truncated data, raw") {
    write_file(path, idx_u8({10, 4, 4}).substr(0, 16 + 100));
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path + ": truncated: expected 160 bytes of data, found 100"));
  }
  SECTION("truncated header, raw") {
    write_file(path, idx_u8({10, 4, 4}).substr(0, 9));
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path) && Contains("truncated") && Contains("3 dimensions"));
  }
  SECTION("truncated gzip") {
    std::string compressed = gzip(idx_u8({100, 28, 28}));
    write_file(path, compressed.substr(0, compressed.size() / 2));
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path + ": truncated: expected 78400 bytes of data, found") &&
                                                Contains("gzip stream ends early"));
  }
  SECTION("gzip cut off in its checksum trailer") {
    std::string compressed = gzip(idx_u8({4, 4}));
    write_file(path, compressed.substr(0, compressed.size() - 3));
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path) && Contains("truncated"));
  }
  SECTION("corrupt gzip") {
    std::string compressed = gzip(idx_u8({100, 28, 28}));
    compressed[10] = static_cast<char>(0xFF);  // first deflate block: reserved block type
    write_file(path, compressed);
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path) && Contains("corrupt gzip data"));
  }
  SECTION("corrupt gzip checksum") {
    std::string compressed = gzip(idx_u8({4, 4}));
    compressed[compressed.size() - 6] ^= 0x55;
    write_file(path, compressed);
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path) && Contains("corrupt gzip data"));
  }
  SECTION("trailing garbage, raw") {
    write_file(path, idx_u8({4, 4}) + "extra");
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path) && Contains("trailing garbage: 5 bytes"));
  }
  SECTION("trailing garbage inside the gzip data") {
    write_file(path, gzip(idx_u8({4, 4}) + "extra"));
    REQUIRE_FILE_ERROR(ddp::read_idx(path), Contains(path) && Contains("trailing garbage: 5 bytes"));
  }
  SECTION("trailing garbage after the gzip stream") {
    write_file(path, gzip(idx_u8({4, 4})) + "junk!!");
    REQUIRE_FILE_ERROR(ddp::read_idx(path),
                       Contains(path) && Contains("trailing garbage: 6 bytes after the end of the gzip"));
  }
}

TEST_CASE("load_idx_split checks the pair of files", "[data][idx]") {
  TempDir dir;
  const std::string images = dir.file("train-images-idx3-ubyte");
  const std::string labels = dir.file("train-labels-idx1-ubyte.gz");

  SECTION("a small valid split, mixing raw and gzip") {
    write_file(images, idx_u8({5, 2, 3}));
    write_file(labels, gzip(idx_bytes(0x08, {5}, std::string("\x01\x02\x03\x04\x00", 5))));
    ddp::Dataset data = ddp::load_idx_split(dir.path(), "train");
    CHECK(data.size() == 5);
    CHECK(to_vector(data.labels) == std::vector<int64_t>{1, 2, 3, 4, 0});
    CHECK(data.source.find(dir.path()) != std::string::npos);
  }
  SECTION("counts disagree") {
    write_file(images, idx_u8({5, 2, 3}));
    write_file(labels, gzip(idx_u8({4})));
    REQUIRE_FILE_ERROR(ddp::load_idx_split(dir.path(), "train"),
                       Contains(images) && Contains(labels) && Contains("5 images") && Contains("4 labels"));
  }
  SECTION("images not 3-D") {
    write_file(images, idx_u8({5, 6}));
    write_file(labels, idx_u8({5}));
    REQUIRE_FILE_ERROR(ddp::load_idx_split(dir.path(), "train"), Contains(images) && Contains("expected 3-D images"));
  }
  SECTION("labels not 1-D") {
    write_file(images, idx_u8({5, 2, 2}));
    write_file(labels, gzip(idx_u8({5, 1})));
    REQUIRE_FILE_ERROR(ddp::load_idx_split(dir.path(), "train"), Contains(labels) && Contains("expected 1-D labels"));
  }
  SECTION("labels file missing") {
    write_file(images, idx_u8({5, 2, 2}));
    REQUIRE_FILE_ERROR(ddp::load_idx_split(dir.path(), "train"),
                       Contains(dir.path()) && Contains("train-labels-idx1-ubyte and train-labels-idx1-ubyte.gz"));
  }
  SECTION("labels a directory: said so, not missing") {
    write_file(images, idx_u8({5, 2, 2}));
    std::filesystem::create_directories(labels);
    REQUIRE_FILE_ERROR(ddp::load_idx_split(dir.path(), "train"),
                       Contains(dir.path()) && Contains("its train labels train-labels-idx1-ubyte.gz is a directory, "
                                                        "not a file"));
  }
  SECTION("both a raw file and its .gz: the same data read (torchvision's layout), other data refused") {
    write_file(images, idx_u8({5, 2, 3}));
    write_file(images + ".gz", gzip(idx_u8({5, 2, 3})));
    write_file(labels, gzip(idx_u8({5})));
    CHECK(ddp::load_idx_split(dir.path(), "train").size() == 5);
    write_file(images + ".gz", gzip(idx_u8({4, 2, 3})));
    REQUIRE_FILE_ERROR(ddp::load_idx_split(dir.path(), "train"),
                       Contains(dir.path() + ": holds both train-images-idx3-ubyte and train-images-idx3-ubyte.gz, "
                                             "and they differ"));
  }
  SECTION("test split looks for t10k files") {
    REQUIRE_FILE_ERROR(ddp::load_idx_split(dir.path(), "test"), Contains("t10k-images-idx3-ubyte"));
  }
  SECTION("missing directory") {
    const std::string missing = dir.file("nope");
    REQUIRE_FILE_ERROR(ddp::load_idx_split(missing, "train"), Contains(missing) && Contains("does not exist"));
  }
  SECTION("a broken file inside the split is named") {
    write_file(images, idx_u8({5, 2, 3}).substr(0, 20));
    write_file(labels, gzip(idx_u8({5})));
    REQUIRE_FILE_ERROR(ddp::load_idx_split(dir.path(), "train"), Contains(images) && Contains("truncated"));
  }
  SECTION("unknown split") { REQUIRE_THROWS_AS(ddp::load_idx_split(dir.path(), "val"), std::invalid_argument); }
}

TEST_CASE("the synthetic dataset is deterministic, balanced and learnable", "[data][synthetic]") {
  torch::manual_seed(5);
  torch::Tensor before = torch::rand({4});
  torch::manual_seed(5);
  ddp::Dataset a = ddp::make_synthetic_dataset(2000, 10, 7);
  CHECK(torch::equal(torch::rand({4}), before));  // the global RNG is untouched

  CHECK(a.features.sizes() == torch::IntArrayRef({2000, 1, 28, 28}));
  CHECK(a.features.scalar_type() == torch::kUInt8);
  CHECK(a.labels.scalar_type() == torch::kLong);
  CHECK(torch::equal(a.labels.bincount(), torch::full({10}, 200, torch::kLong)));
  ddp::Dataset b = ddp::make_synthetic_dataset(2000, 10, 7);
  CHECK(torch::equal(a.features, b.features));
  CHECK(torch::equal(a.labels, b.labels));
  CHECK_FALSE(torch::equal(ddp::make_synthetic_dataset(2000, 10, 8).features, a.features));

  // Nearest class mean, fitted on half and scored on the other half: learnable means near-perfect.
  torch::Tensor x = a.features.reshape({2000, -1}).to(torch::kFloat);
  torch::Tensor fit_x = x.narrow(0, 0, 1000), fit_y = a.labels.narrow(0, 0, 1000);
  torch::Tensor means = torch::zeros({10, 784});
  means.index_add_(0, fit_y, fit_x).div_(fit_y.bincount({}, 10).unsqueeze(1).to(torch::kFloat));
  torch::Tensor predicted = torch::cdist(x.narrow(0, 1000, 1000), means).argmin(1);
  double accuracy = predicted.eq(a.labels.narrow(0, 1000, 1000)).to(torch::kFloat).mean().item<double>();
  CHECK(accuracy > 0.95);

  CHECK(ddp::make_synthetic_dataset(0, 10, 1).size() == 0);
  CHECK_THROWS_AS(ddp::make_synthetic_dataset(10, 0, 1), std::invalid_argument);
}

TEST_CASE("DistributedSampler sizes, padding and strides", "[data][sampler]") {
  struct Case {
    int64_t n, replicas;
    bool drop_last;
    int64_t num_samples;
  };
  for (Case c : {Case{10, 3, false, 4}, Case{10, 3, true, 3}, Case{9, 3, false, 3}, Case{9, 3, true, 3},
                 Case{3, 4, false, 1}, Case{3, 4, true, 0}, Case{1, 1, false, 1}, Case{2, 5, false, 1},
                 Case{60000, 7, false, 8572}, Case{60000, 7, true, 8571}}) {
    CAPTURE(c.n, c.replicas, c.drop_last);
    ddp::DistributedSampler sampler(c.n, c.replicas, c.replicas - 1, sampler_config(true, 0, c.drop_last));
    CHECK(sampler.num_samples() == c.num_samples);
    CHECK(sampler.total_size() == c.num_samples * c.replicas);
    CHECK(sampler.indices().sizes() == torch::IntArrayRef({c.num_samples}));
    CHECK(sampler.indices().scalar_type() == torch::kLong);
  }
  using V = std::vector<std::vector<int64_t>>;
  // Unshuffled, padding repeats the head; ranks take every R-th index.
  CHECK(all_ranks(10, 3, sampler_config(false, 0, false), 0) == V{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}});
  CHECK(all_ranks(10, 3, sampler_config(false, 0, true), 0) == V{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}});
  // Padding longer than the dataset cycles it whole.
  CHECK(all_ranks(2, 5, sampler_config(false, 0, false), 0) == V{{0}, {1}, {0}, {1}, {0}});
  CHECK(all_ranks(3, 4, sampler_config(false, 0, true), 0) == V{{}, {}, {}, {}});
}

TEST_CASE("DistributedSampler ranks cover the dataset and epochs reshuffle", "[data][sampler]") {
  for (int64_t n : {1, 7, 10, 101, 1000}) {
    for (int64_t replicas : {1, 2, 3, 4, 8}) {
      for (bool drop_last : {false, true}) {
        CAPTURE(n, replicas, drop_last);
        std::multiset<int64_t> seen;
        for (const auto& indices : all_ranks(n, replicas, sampler_config(true, 3, drop_last), 2)) {
          seen.insert(indices.begin(), indices.end());
        }
        std::set<int64_t> distinct(seen.begin(), seen.end());
        if (drop_last) {
          CHECK(distinct.size() == seen.size());  // trimmed, never repeated
          CHECK(static_cast<int64_t>(seen.size()) == (n / replicas) * replicas);
        } else {
          CHECK(static_cast<int64_t>(distinct.size()) == n);  // padded, everything covered
        }
        CHECK((distinct.empty() || (*distinct.begin() >= 0 && *distinct.rbegin() < n)));
      }
    }
  }
  ddp::DistributedSampler sampler(1000, 2, 1, sampler_config(true, 11, false));
  torch::Tensor epoch0 = sampler.indices();
  CHECK(torch::equal(sampler.indices(), epoch0));
  sampler.set_epoch(1);
  CHECK(sampler.epoch() == 1);
  torch::Tensor epoch1 = sampler.indices();
  CHECK_FALSE(torch::equal(epoch1, epoch0));
  // Only seed + epoch matters: seed 12 at epoch 0 is seed 11 at epoch 1.
  ddp::DistributedSampler other_seed(1000, 2, 1, sampler_config(true, 12, false));
  CHECK(torch::equal(other_seed.indices(), epoch1));
  CHECK_FALSE(torch::equal(other_seed.indices(), epoch0));
  sampler.set_epoch(0);
  CHECK(torch::equal(sampler.indices(), epoch0));
}

TEST_CASE("sampler.split chunk gives rank r the r-th contiguous chunk of n // world, shuffled within it", "[data][sampler]") {
  // PyG's example: train_idx.split(train_idx.size(0) // world_size)[rank], the remainder dropped.
  auto config = sampler_config(true, 5, false);
  config.split = "chunk";
  for (int64_t replicas : {1, 2, 3}) {
    CAPTURE(replicas);
    std::set<int64_t> seen;
    for (int64_t rank = 0; rank < replicas; ++rank) {
      ddp::DistributedSampler sampler(31, replicas, rank, config);
      const int64_t chunk = 31 / replicas;
      CHECK(sampler.num_samples() == chunk);
      auto epoch0 = sampler.indices();
      sampler.set_epoch(1);
      auto epoch1 = sampler.indices();
      CHECK_FALSE(torch::equal(epoch0, epoch1));  // reshuffled each epoch ...
      auto sorted = std::get<0>(epoch1.sort());
      CHECK(torch::equal(sorted, torch::arange(rank * chunk, (rank + 1) * chunk, torch::kLong)));  // ... within its chunk
      for (int64_t i = 0; i < chunk; ++i) seen.insert(epoch0[i].item<int64_t>());
    }
    CHECK(static_cast<int64_t>(seen.size()) == (31 / replicas) * replicas);
  }
  config.shuffle = false;
  CHECK(torch::equal(ddp::DistributedSampler(31, 3, 2, config).indices(), torch::arange(20, 30, torch::kLong)));
}

TEST_CASE("DistributedSampler rejects bad arguments", "[data][sampler]") {
  ddp::SamplerConfig config;
  CHECK_THROWS_AS(ddp::DistributedSampler(10, 2, 2, config), std::invalid_argument);
  CHECK_THROWS_AS(ddp::DistributedSampler(10, 2, -1, config), std::invalid_argument);
  CHECK_THROWS_AS(ddp::DistributedSampler(10, 0, 0, config), std::invalid_argument);
  CHECK_THROWS_AS(ddp::DistributedSampler(0, 1, 0, config), std::invalid_argument);
  CHECK_THROWS_WITH(ddp::DistributedSampler(10, 2, 5, config), Contains("rank") && Contains("5"));
}

TEST_CASE("DistributedSampler matches PyTorch's index for index", "[data][sampler][python]") {
  struct Case {
    int64_t n, replicas, seed, epoch;
    bool shuffle, drop_last;
  };
  const std::vector<Case> cases = {
      {60000, 2, 0, 0, true, false}, {60000, 2, 0, 3, true, false}, {10, 3, 0, 0, true, false},
      {10, 3, 0, 0, true, true},     {7, 4, 0, 0, false, false},    {7, 4, 0, 0, false, true},
      {1000, 3, 42, 5, true, false}, {3, 5, 42, 1, true, false},    {50, 4, -1, 0, true, true}};
  // One run for all cases: importing torch costs about a second.
  std::vector<std::string> argv = {"/usr/bin/python3", std::string(DDP_SOURCE_DIR) + "/tests/data/sampler_indices.py"};
  for (const Case& c : cases) {
    for (int64_t v : {c.n, c.replicas, c.seed, c.epoch, int64_t{c.shuffle}, int64_t{c.drop_last}}) {
      argv.push_back(std::to_string(v));
    }
  }
  auto result = ddp::test::run_command(argv);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  std::istringstream lines(result.out);
  for (const Case& c : cases) {
    CAPTURE(c.n, c.replicas, c.seed, c.epoch, c.shuffle, c.drop_last);
    std::vector<std::vector<int64_t>> python;
    std::string line;
    for (int64_t rank = 0; rank < c.replicas && std::getline(lines, line); ++rank) {
      std::istringstream fields(line);
      python.emplace_back(std::istream_iterator<int64_t>(fields), std::istream_iterator<int64_t>());
    }
    REQUIRE(python.size() == static_cast<size_t>(c.replicas));
    CHECK(python == all_ranks(c.n, c.replicas, sampler_config(c.shuffle, c.seed, c.drop_last), c.epoch));
  }
  std::string rest;
  CHECK_FALSE(std::getline(lines, rest));
}

TEST_CASE("gather_batch gathers and normalises", "[data][batch]") {
  torch::manual_seed(0);
  ddp::Dataset data;
  data.features = torch::randint(0, 256, {20, 1, 28, 28}, torch::kUInt8);
  data.features[0].fill_(0);
  data.features[1].fill_(255);
  data.labels = torch::arange(20, torch::kLong).remainder(10);
  const double mean = 0.2860, stddev = 0.3530;
  const ddp::Normalizer normalizer{255.0, mean, stddev};

  torch::Tensor indices = torch::tensor({3, 0, 19, 3, 1}, torch::kLong);
  ddp::Batch batch = ddp::gather_batch(data, indices, normalizer);
  REQUIRE(batch.inputs.size() == 1);
  const torch::Tensor& images = batch.inputs[0];
  CHECK(batch.size() == 5);
  CHECK(images.sizes() == torch::IntArrayRef({5, 1, 28, 28}));
  CHECK(images.scalar_type() == torch::kFloat);
  CHECK(to_vector(batch.targets) == std::vector<int64_t>{3, 0, 9, 3, 1});
  CHECK(images[1].min().item<double>() == Approx(-mean / stddev));
  CHECK(images[4].max().item<double>() == Approx((1 - mean) / stddev));
  for (int64_t i = 0; i < indices.size(0); ++i) {
    int64_t index = indices[i].item<int64_t>();
    torch::Tensor expected = (data.features[index][0].to(torch::kDouble) / 255.0 - mean) / stddev;
    CHECK(torch::allclose(images[i][0].to(torch::kDouble), expected, 1e-5, 1e-5));
  }
  CHECK(ddp::gather_batch(data, torch::empty({0}, torch::kLong), normalizer).inputs[0].sizes() ==
        torch::IntArrayRef({0, 1, 28, 28}));
}

TEST_CASE("eval_shard splits the eval set without padding or overlap", "[data][batch]") {
  for (int64_t n : {10000, 7, 3, 1, 0}) {
    for (int64_t world = 1; world <= 4; ++world) {
      CAPTURE(n, world);
      int64_t expected_begin = 0;
      for (int64_t rank = 0; rank < world; ++rank) {
        auto [begin, end] = ddp::eval_shard(n, world, rank);
        CHECK(begin == expected_begin);  // contiguous and disjoint
        CHECK(end >= begin);
        CHECK(end - begin <= n / world + 1);  // balanced
        expected_begin = end;
      }
      CHECK(expected_begin == n);  // the union is everything
    }
  }
  CHECK(ddp::eval_shard(10000, 4, 3) == std::pair<int64_t, int64_t>{7500, 10000});
  CHECK(ddp::eval_shard(3, 4, 3) == std::pair<int64_t, int64_t>{3, 3});
  CHECK_THROWS_AS(ddp::eval_shard(10, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(ddp::eval_shard(10, 0, 0), std::invalid_argument);
}

}  // namespace DDP_TEST_FILE
