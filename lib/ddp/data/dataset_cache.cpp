#include "ddp/data/dataset_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>

#include "ddp/data/cache_seal.h"
#include "ddp/data/dataset_format.h"
#include "ddp/data/idx_reader.h"
#include "ddp/data/node_cache.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

// Format 2 added the seal (cache_seal.h); a file of format 1 has none and is rebuilt.
constexpr char kDatasetMagic[8] = {'D', 'D', 'P', 'C', 'A', 'C', 'H', '2'};

// The cache file: magic, then int64 count, height, width, then uint8 images [count, 1, height,
// width], then int64 labels, then the seal; the header, images and labels are its regions.
struct Header {
  char magic[8];
  int64_t count, height, width;
};

// The split's two source files, images first: the ones the reader reads (find_idx_file), or the
// cache would be keyed on other files than the data.
std::vector<std::string> source_files(const std::string& dir, const std::string& split) {
  std::string prefix = split == "train" ? "train" : "t10k";
  return {find_idx_file(dir, prefix + "-images-idx3-ubyte"), find_idx_file(dir, prefix + "-labels-idx1-ubyte")};
}

void write_cache(const std::string& path, mode_t mode, const Dataset& data, const std::string& sources) {
  Header header{};
  std::memcpy(header.magic, kDatasetMagic, sizeof kDatasetMagic);
  header.count = data.features.size(0);
  header.height = data.features.size(2);
  header.width = data.features.size(3);
  auto images = data.features.contiguous();
  auto labels = data.labels.to(torch::kLong).contiguous();
  write_sealed_cache(path,
                     {{"header", {reinterpret_cast<const char*>(&header), sizeof header}},
                      {"images", {static_cast<const char*>(images.data_ptr()), static_cast<std::size_t>(images.numel())}},
                      {"labels", {static_cast<const char*>(labels.data_ptr()), labels.numel() * sizeof(int64_t)}}},
                     sources, mode);
}

// Opens a cache file; nullopt when it is missing, CacheRejected when it is not what this split's
// sources would build (its seal, its header). The labels are read into memory; the images stay in
// the file (see sample_file.h).
std::optional<Dataset> open_cache(const std::string& path, const std::string& source, const std::string& sources) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  Dataset data;
  Header header{};
  try {
    CacheSeal seal = read_cache_seal(fd);
    check_cache_sources(seal, sources);
    if (seal.payload_bytes < static_cast<int64_t>(sizeof header) || pread(fd, &header, sizeof header, 0) != sizeof header ||
        std::memcmp(header.magic, kDatasetMagic, sizeof kDatasetMagic) != 0)
      throw CacheRejected("its header is not an IDX cache's of this format");
    int64_t images = 0, labels_at = 0, label_bytes = 0, expected = 0;
    if (header.count < 0 || header.height < 0 || header.width < 0 ||
        __builtin_mul_overflow(header.count, header.height, &images) || __builtin_mul_overflow(images, header.width, &images) ||
        __builtin_add_overflow(images, static_cast<int64_t>(sizeof header), &labels_at) ||
        __builtin_mul_overflow(header.count, 8, &label_bytes) || __builtin_add_overflow(labels_at, label_bytes, &expected) ||
        expected != seal.payload_bytes)
      throw CacheRejected("its header describes " + std::to_string(header.count) + " images of " +
                          std::to_string(header.height) + "x" + std::to_string(header.width) + ", not the " +
                          std::to_string(seal.payload_bytes) + " bytes it holds");
    data.labels = torch::empty({header.count}, torch::kLong);
    if (pread(fd, data.labels.data_ptr(), label_bytes, labels_at) != label_bytes)
      throw CacheRejected("its labels cannot be read");
  } catch (...) {
    close(fd);
    throw;
  }
  data.feature_file = std::make_shared<SampleFile>(fd, path, sizeof header, header.count,
                                                   std::vector<int64_t>{1, header.height, header.width}, torch::kUInt8);
  data.source = source;
  return data;
}

}  // namespace

Dataset load_idx_split_cached(const std::string& dir, const std::string& split, const std::string& cache_dir) {
  const std::vector<std::string> files = source_files(dir, split);
  std::string key = cache_file_name(split, files, "ddpcache");
  std::string sources = source_identity(files);
  if (cache_dir.empty() || cache_dir == "none" || key.empty() || sources.empty()) return load_idx_split(dir, split);
  std::string path = cache_dir + "/" + key;
  std::string source = dir + " (" + split + ")";
  std::optional<Dataset> result;
  bool opened = open_or_build_cache(
      path, [&] { return (result = open_cache(path, source, sources)).has_value(); },
      [&](const std::string& file, mode_t mode) { write_cache(file, mode, load_idx_split(dir, split), sources); },
      cache_file_mode(files.front()), source);
  return opened ? *result : load_idx_split(dir, split);
}

void register_idx_format(DatasetFormats& formats) {
  formats.add("idx").load_splits = [](const DataConfig& config, int64_t) {
    std::string cache = resolve_cache_dir(config.cache_dir);
    DatasetSplits splits;
    splits.train = load_idx_split_cached(config.path, "train", cache);
    if (config.eval_split == "test") splits.eval = load_idx_split_cached(config.path, "test", cache);
    return splits;
  };
}

}  // namespace ddp
