#include "ddp/data/dataset_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>

#include "ddp/common/atomic_file.h"
#include "ddp/data/dataset_format.h"
#include "ddp/data/idx_reader.h"
#include "ddp/data/node_cache.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'D', 'D', 'P', 'C', 'A', 'C', 'H', '1'};

// The cache file: magic, then int64 count, height, width, then uint8 images [count, 1, height,
// width], then int64 labels.
struct Header {
  char magic[8];
  int64_t count, height, width;
};

std::string source_file(const std::string& dir, const std::string& stem) {
  for (const auto& name : {stem, stem + ".gz"})
    if (fs::exists(dir + "/" + name)) return dir + "/" + name;
  return "";
}

std::string cache_key(const std::string& dir, const std::string& split) {
  std::string prefix = split == "train" ? "train" : "t10k";
  return cache_file_name(split, {source_file(dir, prefix + "-images-idx3-ubyte"), source_file(dir, prefix + "-labels-idx1-ubyte")},
                         "ddpcache");
}

std::string encode(const Dataset& data) {
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.count = data.features.size(0);
  header.height = data.features.size(2);
  header.width = data.features.size(3);
  auto images = data.features.contiguous();
  auto labels = data.labels.to(torch::kLong).contiguous();
  std::string bytes(reinterpret_cast<const char*>(&header), sizeof header);
  bytes.append(static_cast<const char*>(images.data_ptr()), images.numel());
  bytes.append(static_cast<const char*>(labels.data_ptr()), labels.numel() * sizeof(int64_t));
  return bytes;
}

// Opens a cache file; nullopt when it is missing or does not hold what its header says. The
// labels are read into memory; the images stay in the file (see sample_file.h).
std::optional<Dataset> open_cache(const std::string& path, const std::string& source) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat info {};
  fstat(fd, &info);
  Header header{};
  bool ok = static_cast<std::size_t>(info.st_size) >= sizeof header && pread(fd, &header, sizeof header, 0) == sizeof header &&
            std::memcmp(header.magic, kMagic, sizeof kMagic) == 0 && header.count >= 0;
  const int64_t labels_at = sizeof header + header.count * header.height * header.width;
  const auto label_bytes = static_cast<ssize_t>(header.count * sizeof(int64_t));
  ok = ok && info.st_size == static_cast<off_t>(labels_at + label_bytes);
  Dataset data;
  if (ok) {
    data.labels = torch::empty({header.count}, torch::kLong);
    ok = pread(fd, data.labels.data_ptr(), label_bytes, labels_at) == label_bytes;
  }
  if (!ok) {
    close(fd);
    return std::nullopt;
  }
  data.feature_file = std::make_shared<SampleFile>(fd, path, sizeof header, header.count,
                                                   std::vector<int64_t>{1, header.height, header.width}, torch::kUInt8);
  data.source = source;
  return data;
}

}  // namespace

Dataset load_idx_split_cached(const std::string& dir, const std::string& split, const std::string& cache_dir) {
  std::string key = cache_key(dir, split);
  if (cache_dir.empty() || cache_dir == "none" || key.empty()) return load_idx_split(dir, split);
  std::string path = cache_dir + "/" + key;
  std::string source = dir + " (" + split + ")";
  std::optional<Dataset> result;
  mode_t mode = cache_file_mode(source_file(dir, (split == "train" ? "train" : "t10k") + std::string("-images-idx3-ubyte")));
  bool opened = open_or_build_cache(
      path, [&] { return (result = open_cache(path, source)).has_value(); },
      [&](const std::string& file, mode_t file_mode) { write_file_atomically(file, encode(load_idx_split(dir, split)), file_mode); },
      mode, source);
  return opened ? *result : load_idx_split(dir, split);
}

void register_idx_format(DatasetFormats& formats) {
  formats["idx"].load_splits = [](const DataConfig& config, int64_t) {
    std::string cache = resolve_cache_dir(config.cache_dir);
    DatasetSplits splits;
    splits.train = load_idx_split_cached(config.path, "train", cache);
    if (config.eval_split == "test") splits.eval = load_idx_split_cached(config.path, "test", cache);
    return splits;
  };
}

}  // namespace ddp
