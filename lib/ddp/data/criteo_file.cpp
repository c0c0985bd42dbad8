#include "ddp/data/criteo_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/data/cache_seal.h"
#include "ddp/data/data_config.h"
#include "ddp/data/dataset_format.h"
#include "ddp/data/dataset_splits.h"
#include "ddp/data/node_cache.h"
#include "ddp/data/sample_file.h"

namespace ddp {
namespace {

constexpr int64_t kFields = 1 + kCriteoDense + kCriteoCategorical;
constexpr int64_t kFeatures = kCriteoDense + kCriteoCategorical;

// Parses all of `text` as an integer in `base`; false for anything else (an empty field is missing,
// which the caller handles first).
template <typename T>
bool parse_whole(std::string_view text, T& value, int base) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  return error == std::errc() && end == text.data() + text.size();
}

// The node cache of a click log (Note [Verified once per node]): the features region (float64
// [N, 39], as read_criteo_file gives them), the labels region (float32 [N]), then a header region
// (magic, N), written last because N is known only at the end of the log.
constexpr char kCriteoMagic[8] = {'D', 'D', 'P', 'C', 'R', 'T', 'O', '1'};

struct Header {
  char magic[8];
  int64_t count;
};

// The regions of a cache file's seal by name; CacheRejected when one is missing.
const CacheSeal::Region& region(const CacheSeal& seal, const std::string& name) {
  for (const auto& r : seal.regions)
    if (r.name == name) return r;
  throw CacheRejected("it has no " + name + " region: not a click log's cache of this format");
}

std::optional<Dataset> open_cache(const std::string& path, const std::string& source, const std::string& sources) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  Dataset data;
  int64_t features_at = 0, count = 0;
  try {
    CacheSeal seal = read_cache_seal(fd);
    check_cache_sources(seal, sources);
    const auto& head = region(seal, "header");
    const auto& features = region(seal, "features");
    const auto& labels = region(seal, "labels");
    Header header{};
    if (head.bytes != static_cast<int64_t>(sizeof header) ||
        ::pread(fd, &header, sizeof header, head.offset) != static_cast<ssize_t>(sizeof header) ||
        std::memcmp(header.magic, kCriteoMagic, sizeof kCriteoMagic) != 0)
      throw CacheRejected("its header is not a click log cache's of this format");
    count = header.count;
    if (count < 1 || features.bytes != count * kFeatures * 8 || labels.bytes != count * 4)
      throw CacheRejected("its header says " + std::to_string(count) + " impressions, which its regions do not hold");
    data.labels = torch::empty({count, 1}, torch::kFloat);
    if (::pread(fd, data.labels.data_ptr(), static_cast<std::size_t>(labels.bytes), labels.offset) != labels.bytes)
      throw CacheRejected("its labels cannot be read");
    features_at = features.offset;
  } catch (...) {
    ::close(fd);
    throw;
  }
  data.feature_file =
      std::make_shared<SampleFile>(fd, path, features_at, count, std::vector<int64_t>{kFeatures}, torch::kDouble);
  data.source = source;
  return data;
}

// Writes the cache of `path` into `file`, converting the log as it reads it: the features go out
// a block at a time, and only the labels (4 bytes an impression) are held until the end.
void write_cache(const std::string& file, mode_t mode, const std::string& path, const std::string& sources) {
  std::vector<float> labels;
  std::vector<StreamedCacheRegion> regions;
  regions.push_back({"features", [&](const ByteSink& sink) {
                       constexpr std::size_t kBlock = 8192;  // impressions a write
                       std::vector<double> block;
                       block.reserve(kBlock * kFeatures);
                       for_each_impression(path, [&](float label, const double* features) {
                         labels.push_back(label);
                         block.insert(block.end(), features, features + kFeatures);
                         if (block.size() == kBlock * kFeatures) {
                           sink(reinterpret_cast<const char*>(block.data()), block.size() * sizeof(double));
                           block.clear();
                         }
                       });
                       sink(reinterpret_cast<const char*>(block.data()), block.size() * sizeof(double));
                     }});
  regions.push_back({"labels", [&](const ByteSink& sink) {
                       sink(reinterpret_cast<const char*>(labels.data()), labels.size() * sizeof(float));
                     }});
  regions.push_back({"header", [&](const ByteSink& sink) {
                       Header header{};
                       std::memcpy(header.magic, kCriteoMagic, sizeof kCriteoMagic);
                       header.count = static_cast<int64_t>(labels.size());
                       sink(reinterpret_cast<const char*>(&header), sizeof header);
                     }});
  write_sealed_cache(file, regions, sources, mode);
}

}  // namespace

void for_each_impression(const std::string& path, const std::function<void(float label, const double* features)>& impression) {
  require_regular_file(path);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!in) throw FileError("cannot read " + path + ": " + std::strerror(errno));
  char* buffer = nullptr;  // getline's, grown as lines need
  std::size_t capacity = 0;
  struct FreeBuffer {
    char*& buffer;
    ~FreeBuffer() { std::free(buffer); }
  } free_buffer{buffer};
  int64_t line_number = 0, first_empty = 0, impressions = 0;
  auto fault = [&](const std::string& what) {
    return FileError(path + " line " + std::to_string(line_number) + ": " + what);
  };
  std::string_view fields[kFields];
  double features[kFeatures];
  for (;;) {
    errno = 0;
    const ssize_t got = ::getline(&buffer, &capacity, in.get());
    if (got < 0) {
      if (std::ferror(in.get())) throw FileError("cannot read " + path + ": " + std::strerror(errno));
      break;
    }
    ++line_number;
    std::string_view line(buffer, static_cast<std::size_t>(got));
    const bool ended = !line.empty() && line.back() == '\n';
    if (ended) line.remove_suffix(1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // Criteo's files end each line, the last too: one cut short may still have 40 fields, the last
    // of them cut (a hash of 4 digits), so an unended line is refused whatever it holds.
    if (!ended) throw fault("the file ends inside this line, so it looks truncated (Criteo's layout ends every line)");
    // Empty lines at the end (an editor's, a cat of files) are no impressions; one among them is a
    // damaged file, named where it is.
    if (line.empty()) {
      if (first_empty == 0) first_empty = line_number;
      continue;
    }
    if (first_empty > 0) {
      line_number = first_empty;
      throw fault("an empty line, where Criteo's layout has an impression on every line");
    }
    int64_t count = 0;
    for (std::size_t start = 0;;) {
      std::size_t tab = line.find('\t', start);
      if (count < kFields) fields[count] = line.substr(start, tab == std::string_view::npos ? line.npos : tab - start);
      ++count;
      if (tab == std::string_view::npos) break;
      start = tab + 1;
    }
    if (count != kFields)
      throw fault(std::to_string(count) + " fields where Criteo's layout has " + std::to_string(kFields) +
                  " (the label, 13 counts, 26 categorical values, tab-separated)" +
                  (line_number == 1 && line.rfind("\x1f\x8b", 0) == 0 ? "; it is gzip-compressed: decompress it first" : ""));
    if (fields[0] != "0" && fields[0] != "1")
      throw fault("the label is '" + printable(fields[0], 40) + "', expected 0 or 1");
    for (int64_t j = 0; j < kCriteoDense; ++j) {
      std::string_view field = fields[1 + j];
      int64_t value = 0;
      if (!field.empty() && !parse_whole(field, value, 10))
        throw fault("count I" + std::to_string(j + 1) + " is '" + printable(field, 40) +
                    "', expected an integer of at most 64 bits");
      features[j] = std::log1p(static_cast<double>(std::max<int64_t>(value, 0)));
    }
    for (int64_t j = 0; j < kCriteoCategorical; ++j) {
      std::string_view field = fields[1 + kCriteoDense + j];
      uint32_t value = 0;
      if (!field.empty() && (field.size() > 8 || !parse_whole(field, value, 16)))
        throw fault("categorical C" + std::to_string(j + 1) + " is '" + printable(field, 40) +
                    "', expected a 32-bit hash in hexadecimal (at most 8 digits)");
      features[kCriteoDense + j] = static_cast<double>(value);
    }
    impression(fields[0] == "1" ? 1.0f : 0.0f, features);
    ++impressions;
  }
  if (impressions == 0) throw FileError(path + ": holds no impressions (Criteo's layout: one per line)");
}

Dataset read_criteo_file(const std::string& path) {
  std::vector<double> features;  // per line: the 13 log counts, then the 26 hashes
  std::vector<float> labels;
  for_each_impression(path, [&](float label, const double* values) {
    labels.push_back(label);
    features.insert(features.end(), values, values + kFeatures);
  });
  const auto n = static_cast<int64_t>(labels.size());
  Dataset data;
  data.source = path;
  data.features = torch::from_blob(features.data(), {n, kFeatures}, torch::kDouble).clone();
  data.labels = torch::from_blob(labels.data(), {n, 1}, torch::kFloat).clone();
  return data;
}

Dataset load_criteo_cached(const std::string& path, const std::string& cache_dir) {
  require_regular_file(path);  // before the cache's key reads it: a named pipe's open waits for a writer
  const std::vector<std::string> files{path};
  const std::string key = cache_file_name("criteo", files, "ddpcache");
  const std::string sources = source_identity(files);
  if (cache_dir.empty() || cache_dir == "none" || key.empty() || sources.empty()) return read_criteo_file(path);
  const std::string cache = cache_dir + "/" + key;
  std::optional<Dataset> result;
  bool opened = open_or_build_cache(
      cache, [&] { return (result = open_cache(cache, path, sources)).has_value(); },
      [&](const std::string& file, mode_t mode) { write_cache(file, mode, path, sources); }, cache_file_mode(path),
      path);
  return opened ? *result : read_criteo_file(path);
}

void register_criteo_format(DatasetFormats& formats) {
  formats.add("criteo").load_splits = [](const DataConfig& config, int64_t) {
    const std::string cache = resolve_cache_dir(config.cache_dir);
    // Finite by construction (the log of a clamped count, hashes below 2^32): no pass over a log's
    // features, which through the cache would read the whole file on every rank.
    return load_file_splits(
        config, [cache](const std::string& path, const std::string&) { return load_criteo_cached(path, cache); },
        /*check_finite=*/false);
  };
}

}  // namespace ddp
