#include "ddp/data/dataset_cache.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/data/idx_reader.h"

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

// A hash of up to three 64 KiB samples of the file (its start, middle and end): a rewrite that
// kept the size and the timestamps still changes it.
std::size_t sampled_hash(const std::string& path, off_t size) {
  constexpr off_t kSample = 64 << 10;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::string bytes;
  for (off_t at : {off_t{0}, std::max<off_t>(0, size / 2 - kSample / 2), std::max<off_t>(0, size - kSample)}) {
    std::string chunk(static_cast<std::size_t>(std::min(kSample, size)), '\0');
    ssize_t got = pread(fd, chunk.data(), chunk.size(), at);
    bytes += chunk.substr(0, got > 0 ? static_cast<std::size_t>(got) : 0);
  }
  close(fd);
  return std::hash<std::string>{}(bytes);
}

// Any change to a source file gives a different cache file: its path, inode, size, modification
// time to the nanosecond, and a sampled hash of its content.
std::string cache_key(const std::string& dir, const std::string& split) {
  std::string prefix = split == "train" ? "train" : "t10k";
  std::string identity;
  for (const auto& stem : {prefix + "-images-idx3-ubyte", prefix + "-labels-idx1-ubyte"}) {
    std::string path = source_file(dir, stem);
    struct stat info {};
    if (path.empty() || stat(path.c_str(), &info) != 0) return "";
    identity += fs::absolute(path).string() + ":" + std::to_string(info.st_ino) + ":" + std::to_string(info.st_size) +
                ":" + std::to_string(info.st_mtim.tv_sec) + "." + std::to_string(info.st_mtim.tv_nsec) + ":" +
                std::to_string(sampled_hash(path, info.st_size)) + ";";
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(identity));
  return split + "-" + hex + ".ddpcache";
}

// The cache holds the source's data, so it gets the source's read permissions (and no more).
mode_t source_mode(const std::string& dir, const std::string& split) {
  struct stat info {};
  std::string images = source_file(dir, (split == "train" ? "train" : "t10k") + std::string("-images-idx3-ubyte"));
  if (images.empty() || stat(images.c_str(), &info) != 0) return 0600;
  return (info.st_mode & 0444) | S_IWUSR;
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

std::string resolve_cache_dir(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/ddprun";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/ddprun";
  return "";
}

Dataset load_idx_split_cached(const std::string& dir, const std::string& split, const std::string& cache_dir) {
  std::string key = cache_key(dir, split);
  if (cache_dir.empty() || cache_dir == "none" || key.empty()) return load_idx_split(dir, split);
  std::string path = cache_dir + "/" + key;
  std::string source = dir + " (" + split + ")";
  if (auto cached = open_cache(path, source)) return *cached;

  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  int lock = open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (lock < 0) {
    spdlog::warn("data.cache_dir {} is not writable ({}); decoding {} in memory", cache_dir, std::strerror(errno), source);
    return load_idx_split(dir, split);
  }
  // One worker of the node decodes; the others wait here and then open its result.
  flock(lock, LOCK_EX);
  std::optional<Dataset> result = open_cache(path, source);
  try {
    if (!result) {
      write_file_atomically(path, encode(load_idx_split(dir, split)), source_mode(dir, split));
      result = open_cache(path, source);
    }
  } catch (const IoError& e) {  // the cache cannot be written; a broken source (FileError) goes on up
    spdlog::warn("cannot write the dataset cache ({}); decoding {} in memory", e.what(), source);
  } catch (...) {
    flock(lock, LOCK_UN);
    close(lock);
    throw;
  }
  flock(lock, LOCK_UN);
  close(lock);
  return result ? *result : load_idx_split(dir, split);
}

}  // namespace ddp
