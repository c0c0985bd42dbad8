#include <torch/torch.h>

#include <sys/stat.h>

#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/data/dataset_cache.h"
#include "ddp/data/idx_reader.h"
#include "support/subprocess.h"

#undef CHECK  // glog's CHECK (via LibTorch) must not shadow Catch's
#include <catch2/catch.hpp>

using namespace ddp;
using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

std::vector<fs::path> cache_files(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".ddpcache") files.push_back(entry.path());
  return files;
}

}  // namespace

TEST_CASE("the dataset cache decodes once and reads the same data afterwards", "[data][cache]") {
  TempDir cache;
  Dataset reference = load_idx_split(kFashion, "test");
  Dataset first = load_idx_split_cached(kFashion, "test", cache.path());
  REQUIRE(cache_files(cache.path()).size() == 1);
  auto written = fs::last_write_time(cache_files(cache.path())[0]);
  Dataset second = load_idx_split_cached(kFashion, "test", cache.path());
  CHECK(fs::last_write_time(cache_files(cache.path())[0]) == written);  // reused, not rewritten
  for (const Dataset* d : {&first, &second}) {
    REQUIRE(d->feature_file);  // read from the file, not held in memory
    CHECK(d->sample_shape() == std::vector<int64_t>{1, 28, 28});
    CHECK(torch::equal(d->select(torch::arange(d->size())), reference.features));
    auto some = torch::tensor({9999, 0, 17, 17}, torch::kLong);
    CHECK(torch::equal(d->select(some), reference.features.index_select(0, some)));
    CHECK(torch::equal(d->labels, reference.labels));
  }
}

TEST_CASE("a damaged cache file is detected and rebuilt", "[data][cache]") {
  TempDir cache;
  load_idx_split_cached(kFashion, "test", cache.path());
  auto file = cache_files(cache.path()).at(0);
  fs::resize_file(file, fs::file_size(file) / 2);
  Dataset rebuilt = load_idx_split_cached(kFashion, "test", cache.path());
  CHECK(torch::equal(rebuilt.labels, load_idx_split(kFashion, "test").labels));
  write_file(file.string(), "not a cache");
  CHECK(load_idx_split_cached(kFashion, "test", cache.path()).size() == 10000);
}

TEST_CASE("a cache file cut short while in use is an error naming it, not a crash", "[data][cache]") {
  TempDir cache;
  Dataset data = load_idx_split_cached(kFashion, "test", cache.path());
  auto file = cache_files(cache.path()).at(0);
  fs::resize_file(file, 4096);  // a mapping would die of SIGBUS here
  CHECK_THROWS_AS(data.select(torch::tensor({9000}, torch::kLong)), FileError);
  CHECK_THROWS_WITH(data.select(torch::tensor({9000}, torch::kLong)),
                    Catch::Contains(file.string()) && Catch::Contains("cut short"));
  CHECK_THROWS_AS(data.select(torch::tensor({10000}, torch::kLong)), std::out_of_range);
}

TEST_CASE("a changed source file gets a new cache entry", "[data][cache]") {
  TempDir data, cache;
  for (const char* name : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    fs::copy_file(kFashion + "/" + name, data.file(name));
  load_idx_split_cached(data.path(), "test", cache.path());
  fs::last_write_time(data.file("t10k-labels-idx1-ubyte.gz"), fs::file_time_type::clock::now() + std::chrono::hours(1));
  load_idx_split_cached(data.path(), "test", cache.path());
  CHECK(cache_files(cache.path()).size() == 2);
}

TEST_CASE("a source rewritten with the same size and timestamp is not served stale, and the cache keeps its permissions",
          "[data][cache]") {
  TempDir data, cache;
  // Raw (not gzipped) labels: the rewrite below keeps the size exactly.
  Dataset original = load_idx_split(kFashion, "test");
  std::string labels("\x00\x00\x08\x01\x00\x00\x27\x10", 8);
  auto values = original.labels.to(torch::kUInt8).contiguous();
  labels.append(static_cast<const char*>(values.data_ptr()), 10000);
  fs::copy_file(kFashion + "/t10k-images-idx3-ubyte.gz", data.file("t10k-images-idx3-ubyte.gz"));
  write_file(data.file("t10k-labels-idx1-ubyte"), labels);
  REQUIRE(chmod(data.file("t10k-images-idx3-ubyte.gz").c_str(), 0640) == 0);
  auto when = fs::last_write_time(data.file("t10k-labels-idx1-ubyte"));
  Dataset first = load_idx_split_cached(data.path(), "test", cache.path());
  REQUIRE(cache_files(cache.path()).size() == 1);
  CHECK((fs::status(cache_files(cache.path())[0]).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));

  labels[8] = static_cast<char>((labels[8] + 1) % 10);  // sample 0's label, same size
  write_file(data.file("t10k-labels-idx1-ubyte"), labels);
  fs::last_write_time(data.file("t10k-labels-idx1-ubyte"), when);  // the timestamp too, to the nanosecond
  Dataset second = load_idx_split_cached(data.path(), "test", cache.path());
  CHECK(second.labels[0].item<int64_t>() == (first.labels[0].item<int64_t>() + 1) % 10);
}

TEST_CASE("an unwritable cache falls back to memory, and a broken source is still an error", "[data][cache]") {
  TempDir dir;
  write_file(dir.file("a-file"), "x");
  CHECK(load_idx_split_cached(kFashion, "test", dir.file("a-file/cache")).size() == 10000);
  CHECK(load_idx_split_cached(kFashion, "test", "none").size() == 10000);

  std::string labels = read_file(kFashion + "/t10k-labels-idx1-ubyte.gz");
  fs::copy_file(kFashion + "/t10k-images-idx3-ubyte.gz", dir.file("t10k-images-idx3-ubyte.gz"));
  write_file(dir.file("t10k-labels-idx1-ubyte.gz"), labels.substr(0, labels.size() / 2));
  CHECK_THROWS_AS(load_idx_split_cached(dir.path(), "test", dir.file("cache")), FileError);
}
