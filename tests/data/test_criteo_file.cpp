// data.dataset criteo: Criteo's click-log layout read as DLRM reads it, and each broken file
// refused in one line naming the file, the line and the fault.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cmath>
#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/data/criteo_file.h"
#include "ddp/data/dataset_splits.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using Catch::Contains;

namespace {

// A line of the layout: `label`, then `counts` (13 fields) and `hashes` (26 fields) joined by tabs.
std::string line(const std::string& label, std::vector<std::string> counts, std::vector<std::string> hashes) {
  counts.resize(13);
  hashes.resize(26);
  std::string out = label;
  for (const auto& c : counts) out += "\t" + c;
  for (const auto& h : hashes) out += "\t" + h;
  return out;
}

struct ClickFiles {
  test::TempDir dir;
  std::string write(const std::string& text) {
    std::string path = dir.file("day_0");
    test::write_file(path, text);
    return path;
  }
  void refused(const std::string& text, const std::string& cause) {
    std::string path = write(text);
    INFO(cause);
    CHECK_THROWS_AS(read_criteo_file(path), FileError);
    CHECK_THROWS_WITH(read_criteo_file(path), Contains(path) && Contains(cause));
  }
};

}  // namespace

TEST_CASE("a Criteo log: log counts (negatives as 0, missing 0), hashes kept exactly, labels", "[data][criteo]") {
  ClickFiles files;
  std::string text = line("1", {"0", "-1", "", "7", "1000000"}, {"ffffffff", "68fd1e64", "", "0000000a"}) + "\n" +
                     line("0", {}, {}) + "\r\n";  // every field but the label empty; a Windows line end
  Dataset data = read_criteo_file(files.write(text));
  REQUIRE(data.features.sizes() == torch::IntArrayRef({2, 39}));
  CHECK(data.features.scalar_type() == torch::kDouble);
  CHECK(data.labels.sizes() == torch::IntArrayRef({2, 1}));
  CHECK(data.labels[0][0].item<float>() == 1.0f);
  CHECK(data.labels[1][0].item<float>() == 0.0f);
  auto f = data.features[0];
  CHECK(f[0].item<double>() == 0.0);
  CHECK(f[1].item<double>() == 0.0);  // -1: clamped to 0, as DLRM does
  CHECK(f[2].item<double>() == 0.0);  // missing
  CHECK(f[3].item<double>() == Approx(std::log(8.0)));
  CHECK(f[4].item<double>() == Approx(std::log(1000001.0)));
  CHECK(f[13].item<double>() == 4294967295.0);  // every bit of a 32-bit hash
  CHECK(f[14].item<double>() == static_cast<double>(0x68fd1e64));
  CHECK(f[15].item<double>() == 0.0);
  CHECK(f[16].item<double>() == 10.0);
  CHECK(data.features[1].abs().sum().item<double>() == 0.0);
}

TEST_CASE("a broken Criteo log is refused naming the file, the line and the fault", "[data][criteo]") {
  ClickFiles files;
  const std::string good = line("0", {"1"}, {"abc"}) + "\n";
  std::string short_line = good.substr(0, good.rfind('\t')) + "\n";  // 39 fields
  files.refused(good + short_line, "line 2: 39 fields where Criteo's layout has 40");
  std::string cut = good.substr(0, 10);  // the file ends inside its second line
  files.refused(good + cut, "line 2: the file ends inside this line, so it looks truncated");
  // Cut inside its last hash, a line still has 40 fields: an unended last line is refused anyway.
  const std::string full = line("1", {"1"}, std::vector<std::string>(26, "68fd1e64"));
  files.refused(good + full.substr(0, full.size() - 4), "line 2: the file ends inside this line, so it looks truncated");
  files.refused(good + line("2", {}, {}) + "\n", "line 2: the label is '2', expected 0 or 1");
  files.refused(good + line("", {}, {}) + "\n", "line 2: the label is '', expected 0 or 1");
  files.refused(line("1", {"1", "2", "1.5"}, {}) + "\n", "line 1: count I3 is '1.5', expected an integer");
  files.refused(line("1", {}, {"", "zz"}) + "\n", "line 1: categorical C2 is 'zz', expected a 32-bit hash in "
                                                  "hexadecimal (at most 8 digits)");
  files.refused(line("1", {}, {"123456789"}) + "\n", "line 1: categorical C1 is '123456789'");
  files.refused(line("1", {}, {"", "", "-5"}) + "\n", "line 1: categorical C3 is '-5', expected a 32-bit hash");
  // A value with control bytes is shown escaped: the message reaches a terminal.
  files.refused(line("1", {}, {std::string("1f\0\x1b[2J", 7)}) + "\n", "line 1: categorical C1 is '1f\\x00\\x1b[2J'");
  files.refused(good + "\n" + good, "line 2: an empty line");
  files.refused(good + "\n\n" + good + "\n", "line 2: an empty line");
  // Empty lines at the end are no impressions, not a fault (was: "line 2: an empty line").
  CHECK(read_criteo_file(files.write(good + "\n\r\n")).size() == 1);
  files.refused("\n\n", "holds no impressions");
  files.refused(line("1", {"99999999999999999999"}, {}) + "\n", "line 1: count I1 is '99999999999999999999', expected an "
                                                                "integer of at most 64 bits");
  files.refused("", "holds no impressions");
  files.refused(std::string("\x1f\x8b\x08\x00", 4) + "compressed bytes\n", "line 1: 1 fields where Criteo's layout has 40 "
                "(the label, 13 counts, 26 categorical values, tab-separated); it is gzip-compressed: decompress it first");
  CHECK_THROWS_AS(read_criteo_file(files.dir.file("missing")), FileError);
  REQUIRE(mkfifo(files.dir.file("pipe.tsv").c_str(), 0600) == 0);  // its open used to wait for a writer
  for (const std::string& cache_dir : {std::string("none"), files.dir.file("cache")})  // through the cache's key too
    CHECK_THROWS_WITH(load_criteo_cached(files.dir.file("pipe.tsv"), cache_dir),
                      Contains(files.dir.file("pipe.tsv") + ": is not a regular file (a named pipe or a device"));
}

TEST_CASE("data.dataset criteo splits like npy and csv: eval_path, or eval_fraction of the training log",
          "[data][criteo]") {
  ClickFiles files;
  std::string text;
  for (int i = 0; i < 20; ++i) text += line(i % 3 ? "0" : "1", {std::to_string(i)}, {"beef"}) + "\n";
  DataConfig config;
  config.dataset = "criteo";
  config.path = files.write(text);
  config.eval_fraction = 0.25;
  DatasetSplits splits = load_dataset_splits(config, 0);
  CHECK(splits.train.size() == 15);
  REQUIRE(splits.eval);
  CHECK(splits.eval->size() == 5);
  CHECK(splits.train.sample_shape() == std::vector<int64_t>{39});
  config.eval_fraction = 0;
  config.eval_path = config.path;
  splits = load_dataset_splits(config, 0);
  CHECK(splits.eval->size() == 20);
}

TEST_CASE("a click log through the node cache: converted a line at a time, the same features read from the file, "
          "the cache opened again, and a broken log refused alike with no cache left",
          "[data][criteo][cache]") {
  ClickFiles files;
  test::TempDir cache;
  // More impressions than one block of the conversion (8192), with every kind of field.
  std::string text;
  for (int i = 0; i < 20000; ++i)
    text += line(i % 3 ? "0" : "1", {std::to_string(i), "", std::to_string(-i)},
                 {std::to_string(i % 4096), "", "ffffffff"}) + "\n";
  const std::string path = files.write(text);
  Dataset memory = read_criteo_file(path);
  Dataset cached = load_criteo_cached(path, cache.path());
  CHECK_FALSE(cached.features.defined());  // in the file, read on demand
  REQUIRE(cached.feature_file);
  REQUIRE(cached.size() == 20000);
  CHECK(cached.sample_shape() == std::vector<int64_t>{39});
  auto all = torch::arange(20000, torch::kLong);
  CHECK(torch::equal(cached.select(all), memory.features));
  CHECK(torch::equal(cached.labels, memory.labels));
  // Opened, not built again: the file stays as it was.
  std::vector<std::filesystem::path> made;
  for (const auto& entry : std::filesystem::directory_iterator(cache.path()))
    if (entry.path().extension() == ".ddpcache") made.push_back(entry.path());
  REQUIRE(made.size() == 1);
  const auto written = std::filesystem::last_write_time(made[0]);
  Dataset again = load_criteo_cached(path, cache.path());
  CHECK(std::filesystem::last_write_time(made[0]) == written);
  CHECK(torch::equal(again.select(torch::tensor({19999, 0, 8192})), memory.features.index_select(0, torch::tensor({19999, 0, 8192}))));
  // A broken log: read_criteo_file's words, and no cache file of it.
  test::TempDir broken_cache;
  const std::string broken = files.dir.file("day_1");
  test::write_file(broken, text + line("1", {"x"}, {}) + "\n");
  CHECK_THROWS_WITH(load_criteo_cached(broken, broken_cache.path()),
                    Contains(broken + " line 20001: count I1 is 'x', expected an integer"));
  // Nor its lock and in-use files, which stayed for good, a pair for each refused log.
  for (const auto& entry : std::filesystem::directory_iterator(broken_cache.path()))
    CHECK(entry.path().filename().string() == "");
}

}  // namespace DDP_TEST_FILE
