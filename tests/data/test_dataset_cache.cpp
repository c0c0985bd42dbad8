#include <torch/torch.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "ddp/common/error.h"
#include "ddp/data/checksum64.h"
#include "ddp/data/dataset_cache.h"
#include "ddp/data/idx_reader.h"
#include "support/log_capture.h"
#include "support/subprocess.h"

#include <catch2/catch.hpp>

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using namespace ddp;
using namespace ddp::test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

std::vector<fs::path> cache_files(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".ddpcache") files.push_back(entry.path());
  return files;
}

// Overwrites `bytes.size()` bytes of `path` at `offset`, in place (the way a stray write would).
void overwrite(const fs::path& path, int64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The IDX cache's header: magic, count, height, width.
constexpr int64_t kHeaderBytes = 32;

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

TEST_CASE("a build killed part-way leaves a temporary that the next open of that cache removes", "[data][cache]") {
  // A SIGKILL, or a stop before the trainer's handlers, mid-build: 38 MB of a Criteo cache stayed,
  // and a later build of the same cache left it there.
  TempDir cache;
  load_idx_split_cached(kFashion, "test", cache.path());
  const std::string file = cache_files(cache.path()).at(0).string();
  const auto two_minutes_ago = fs::file_time_type::clock::now() - std::chrono::minutes(2);
  for (const std::string& left : {file + ".tmp.Ab12Cd", cache.path() + "/other.ddpcache.tmp.Ab12Cd"}) {
    write_file(left, "half a cache");
    fs::last_write_time(left, two_minutes_ago);
  }
  write_file(file + ".tmp.Xy34Zw", "written this minute: perhaps a live build on another node");
  fs::remove(file);  // rebuilt, under the lock
  load_idx_split_cached(kFashion, "test", cache.path());
  CHECK_FALSE(fs::exists(file + ".tmp.Ab12Cd"));
  CHECK(fs::exists(file + ".tmp.Xy34Zw"));
  CHECK(fs::exists(cache.path() + "/other.ddpcache.tmp.Ab12Cd"));  // another cache's
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

TEST_CASE("the caches of earlier versions of a source are removed by the next build, or the next use of it once the "
          "run that used one has ended", "[data][cache]") {
  // Real runs: a process holds the caches it uses (Note [Caches of earlier versions]).
  TempDir data, cache, out;
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"})
    fs::copy_file(kFashion + "/" + name, data.file(name));
  const std::string labels = data.file("train-labels-idx1-ubyte.gz");
  auto run = [&](const std::string& name, const std::string& before) {
    return before + "OMP_NUM_THREADS=1 " + bin("ddp-train") + " " + std::string(DDP_SOURCE_DIR) +
           "/configs/fashion_mnist_linear3.yaml --master-port " + std::to_string(free_port()) + " --set data.path=" +
           data.path() + " --set data.cache_dir=" +
           cache.path() + " --set data.eval_split=none --set run.output_dir=" + out.file(name) + " > " +
           out.file(name + ".log") + " 2>&1";
  };
  auto train_caches = [&] {
    int n = 0;
    for (const auto& file : cache_files(cache.path())) n += file.filename().string().rfind("train-", 0) == 0;
    return n;
  };
  // A is slowed at each step while B builds the cache of an edited file: A's stays.
  auto edited =
      run_shell(run("a", "DDPRUN_TEST_STEP_DELAY=0:1000 ") + " --set train.max_steps=30 & A=$!; " +
                    until_true("ls " + cache.path() + "/train-*.ddpcache >/dev/null 2>&1") + "touch -d '1 hour ago' " +
                    labels + "; " + run("b", "") + " --set train.max_steps=1; echo b=$?; kill -TERM $A; wait $A",
                std::chrono::seconds(120));
  INFO(edited.out << read_file(out.file("a.log")) << read_file(out.file("b.log")));
  CHECK(count_lines(edited.out, "b=0") == 1);
  CHECK(train_caches() == 2);
  CHECK_THAT(read_file(out.file("b.log")), !Contains("removed"));
  // A has ended: the next run on B's cache, which builds nothing, removes A's.
  auto reused = run_shell(run("b2", "") + " --set train.max_steps=1", std::chrono::seconds(120));
  const std::string b2 = read_file(out.file("b2.log"));
  INFO(b2);
  CHECK(reused.exit_code == 0);
  CHECK(train_caches() == 1);
  CHECK(count_occurrences(b2, "the dataset cache of an earlier version of its sources") == 1);
  // Edited again, with no run using it: C's build removes B's, and what lay beside it.
  auto again = run_shell("touch -d '2 hours ago' " + labels + "; " + run("c", "") + " --set train.max_steps=1",
                         std::chrono::seconds(120));
  const std::string c = read_file(out.file("c.log"));
  INFO(c);
  CHECK(again.exit_code == 0);
  CHECK(train_caches() == 1);
  CHECK(count_occurrences(c, "the dataset cache of an earlier version of its sources") == 1);
  for (const auto& entry : fs::directory_iterator(cache.path())) {
    const std::string name = entry.path().filename().string();
    CHECK((name.rfind(cache_files(cache.path()).at(0).filename().string(), 0) == 0 || name.rfind("t10k-", 0) == 0));
  }
}

TEST_CASE("a run that may not write the cache directory still holds the cache it reads: its owner's build of an "
          "edited source leaves it", "[data][cache]") {
  const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  if (geteuid() != 0 || run_shell(as_nobody + bin("ddp-train") + " --version").exit_code != 0) {
    WARN("skipped: it runs ddp-train as nobody, which needs root and a build tree nobody may run");
    return;
  }
  TempDir data, cache, out;
  for (const auto& dir : {data.path(), cache.path()}) fs::permissions(dir, fs::perms(0755));  // nobody reads, not writes
  fs::permissions(out.path(), fs::perms(0777));
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"}) {
    fs::copy_file(kFashion + "/" + name, data.file(name));
    fs::permissions(data.file(name), fs::perms(0644));
  }
  const std::string labels = data.file("train-labels-idx1-ubyte.gz");
  auto run = [&](const std::string& name, const std::string& before) {
    return before + "OMP_NUM_THREADS=1 " + bin("ddp-train") + " " + std::string(DDP_SOURCE_DIR) +
           "/configs/fashion_mnist_linear3.yaml --master-port " + std::to_string(free_port()) + " --set data.path=" +
           data.path() + " --set data.cache_dir=" + cache.path() + " --set data.eval_split=none --set run.output_dir=" +
           out.file(name) + " > " + out.file(name + ".log") + " 2>&1";
  };
  auto train_caches = [&] {
    int n = 0;
    for (const auto& file : cache_files(cache.path())) n += file.filename().string().rfind("train-", 0) == 0;
    return n;
  };
  // Root builds the cache; nobody's run reads it, slowly, holding its FILE.inuse (seen in /proc),
  // while root edits the source and builds again.
  auto r = run_shell(run("a", "") + " --set train.max_steps=1; " +
                         run("b", "DDPRUN_TEST_STEP_DELAY=0:1000 " + as_nobody + "env ") +
                         " --set train.max_steps=30 & B=$!; " +
                         until_true("ls -l /proc/$B/fd 2>/dev/null | grep -q 'ddpcache.inuse'") +
                         "ls -l /proc/$B/fd | "
                         "grep -c 'ddpcache.inuse'; touch -d '1 hour ago' " +
                         labels + "; " + run("c", "") + " --set train.max_steps=1; echo c=$?; kill -TERM $B; wait $B",
                     std::chrono::seconds(120));
  INFO(r.out << r.err << read_file(out.file("a.log")) << read_file(out.file("b.log")) << read_file(out.file("c.log")));
  CHECK(count_lines(r.out, "1") == 1);  // nobody holds the cache's FILE.inuse
  CHECK(count_lines(r.out, "c=0") == 1);
  CHECK(train_caches() == 2);
  CHECK_THAT(read_file(out.file("c.log")), !Contains("removed"));
}

TEST_CASE("a directory named as a raw IDX file is passed over by the cache's key as by the reader: a changed .gz "
          "is not served stale",
          "[data][cache]") {
  // The reader reads the .gz beside the directory; the cache used to key on the directory, which did not change.
  TempDir data, cache;
  for (const char* name : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    fs::copy_file(kFashion + "/" + name, data.file(name));
  fs::create_directory(data.file("t10k-labels-idx1-ubyte"));
  const auto first = load_idx_split_cached(data.path(), "test", cache.path());
  const auto relabelled = load_idx_split(kFashion, "test").labels.remainder(2);  // the test split, labels changed
  auto r = run_shell("/usr/bin/python3 -c \"import gzip,sys\nd=gzip.open(sys.argv[1]).read()\ngzip.open(sys.argv[1],'wb')"
                     ".write(d[:8]+bytes(b%2 for b in d[8:]))\" " + data.file("t10k-labels-idx1-ubyte.gz"));
  REQUIRE(r.exit_code == 0);
  const auto second = load_idx_split_cached(data.path(), "test", cache.path());
  CHECK(torch::equal(second.labels.to(torch::kLong), relabelled.to(torch::kLong)));
  CHECK_FALSE(torch::equal(second.labels.to(torch::kLong), first.labels.to(torch::kLong)));
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

  // The same for a byte far from the file's start, middle and end (7.8 MB of raw images: an
  // earlier key hashed only three 64 KiB samples, and served this one stale).
  auto pixels = read_idx(kFashion + "/t10k-images-idx3-ubyte.gz").contiguous();
  std::string images("\x00\x00\x08\x03\x00\x00\x27\x10\x00\x00\x00\x1c\x00\x00\x00\x1c", 16);
  images.append(static_cast<const char*>(pixels.data_ptr()), static_cast<std::size_t>(pixels.numel()));
  fs::remove(data.file("t10k-images-idx3-ubyte.gz"));
  write_file(data.file("t10k-images-idx3-ubyte"), images);
  when = fs::last_write_time(data.file("t10k-images-idx3-ubyte"));
  Dataset raw = load_idx_split_cached(data.path(), "test", cache.path());
  const int64_t sample = 1300, offset = 16 + sample * 784 + 400;  // about 1 MB in
  images[offset] = static_cast<char>(static_cast<unsigned char>(images[offset]) ^ 0xFF);
  write_file(data.file("t10k-images-idx3-ubyte"), images);
  fs::last_write_time(data.file("t10k-images-idx3-ubyte"), when);
  Dataset edited = load_idx_split_cached(data.path(), "test", cache.path());
  auto rows = torch::tensor({sample, sample + 1}, torch::kLong);
  auto before = raw.select(rows), after = edited.select(rows);
  CHECK_FALSE(torch::equal(before[0], after[0]));
  CHECK(torch::equal(before[1], after[1]));
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

TEST_CASE("a cache file copied over another split's is detected, said in one line and rebuilt, never used", "[data][cache]") {
  TempDir cache;
  load_idx_split_cached(kFashion, "train", cache.path());
  load_idx_split_cached(kFashion, "test", cache.path());
  fs::path train, test;
  for (const auto& file : cache_files(cache.path()))
    (file.filename().string().rfind("train-", 0) == 0 ? train : test) = file;
  REQUIRE(!train.empty());
  REQUIRE(!test.empty());
  fs::copy_file(train, test, fs::copy_options::overwrite_existing);
  LogCapture log;
  Dataset data = load_idx_split_cached(kFashion, "test", cache.path());
  CHECK(data.size() == 10000);  // the test split, not "over 60000 samples"
  CHECK(torch::equal(data.labels, load_idx_split(kFashion, "test").labels));
  INFO(log.text());
  CHECK(log.count(test.string() + " is not used: it was built from ") == 1);
  CHECK(log.count("train-images-idx3-ubyte") == 1);  // names the source it was built from
  CHECK(load_idx_split_cached(kFashion, "test", cache.path()).size() == 10000);
  CHECK(log.count(" is not used") == 1);  // the rebuilt file is used as it is, without another message
}

TEST_CASE("zeroed labels or changed images in a cache file are detected by its checksums and rebuilt", "[data][cache]") {
  TempDir cache;
  Dataset reference = load_idx_split(kFashion, "test");
  load_idx_split_cached(kFashion, "test", cache.path());
  auto file = cache_files(cache.path()).at(0);
  const int64_t labels_at = kHeaderBytes + 10000 * 28 * 28;
  overwrite(file, labels_at, std::string(10000 * 8, '\0'));
  {
    LogCapture log;
    Dataset data = load_idx_split_cached(kFashion, "test", cache.path());
    CHECK(torch::equal(data.labels, reference.labels));
    INFO(log.text());
    CHECK(log.count("its labels region does not match its checksum") == 1);
  }
  overwrite(file, kHeaderBytes + 5 * 28 * 28 + 300, "\xff\xff");  // two pixels of sample 5
  {
    LogCapture log;
    Dataset data = load_idx_split_cached(kFashion, "test", cache.path());
    CHECK(torch::equal(data.select(torch::arange(10000, torch::kLong)), reference.features));
    INFO(log.text());
    CHECK(log.count("its images region does not match its checksum") == 1);
  }
}

TEST_CASE("a cache file is verified once per version: its record lets later opens skip the checksums", "[data][cache]") {
  TempDir cache;
  load_idx_split_cached(kFashion, "test", cache.path());
  auto file = cache_files(cache.path()).at(0);
  const std::string record = file.string() + ".verified";
  REQUIRE(fs::exists(record));  // the builder records it: its checksums came from the bytes it wrote
  std::string stamp = read_file(record);
  auto written = fs::last_write_time(file);
  fs::remove(record);  // as after a crash between verifying and recording: verified again, not rebuilt
  CHECK(load_idx_split_cached(kFashion, "test", cache.path()).size() == 10000);
  CHECK(fs::last_write_time(file) == written);
  CHECK(read_file(record) == stamp);
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);  // any change moves the ctime
  CHECK(read_file(record) == stamp);
  load_idx_split_cached(kFashion, "test", cache.path());
  CHECK(read_file(record) != stamp);  // verified again, and recorded as the file is now
  CHECK(fs::last_write_time(file) == written);
}

TEST_CASE("checksum64 is XXH64 with seed 0, whole or in pieces", "[data][cache]") {
  // xxHash's own known answers: a cache sealed by an earlier ddprun (its hand-written XXH64) still verifies.
  CHECK(ddp::checksum64("") == 0xef46db3751d8e999ull);
  CHECK(ddp::checksum64("abc") == 0x44bc2cf5ad770999ull);
  std::string bytes(1000, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + 7);
  ddp::Checksum64 pieces;
  pieces.update(bytes.data(), 3);
  pieces.update(bytes.data() + 3, 600);
  pieces.update(bytes.data() + 603, bytes.size() - 603);
  CHECK(pieces.digest() == ddp::checksum64(bytes));
}

}  // namespace DDP_TEST_FILE
