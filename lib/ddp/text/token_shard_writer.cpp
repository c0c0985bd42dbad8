#include "ddp/text/token_shard_writer.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/interruption.h"

namespace ddp {
namespace {

constexpr int kHeaderInts = 256;
constexpr int32_t kMagic16 = 20240520, kVersion16 = 1;
constexpr int32_t kMagic32 = 20240801, kVersion32 = 7;
constexpr int64_t kLargestUint16Vocabulary = 65536;

void append_le(std::string& out, uint32_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

std::string shard_bytes(const std::vector<uint32_t>& tokens, int width) {
  std::string out;
  out.reserve(4 * kHeaderInts + tokens.size() * width);
  append_le(out, static_cast<uint32_t>(width == 2 ? kMagic16 : kMagic32), 4);
  append_le(out, static_cast<uint32_t>(width == 2 ? kVersion16 : kVersion32), 4);
  append_le(out, static_cast<uint32_t>(tokens.size()), 4);
  out.append(4 * (kHeaderInts - 3), '\0');
  for (uint32_t token : tokens) append_le(out, token, width);
  return out;
}

// NAME_SPLIT_NNNNNN.bin, with NAME's regex characters taken literally.
std::regex shard_name(const std::string& name, const std::string& split) {
  return std::regex(std::regex_replace(name, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") + "_" + split +
                    R"(_\d{6}\.bin)");
}

}  // namespace

std::vector<std::string> write_token_shards(const ShardSpec& spec, const std::string& split,
                                            const std::vector<std::vector<uint32_t>>& chunks) {
  namespace fs = std::filesystem;
  const int width = spec.vocab_size <= kLargestUint16Vocabulary ? 2 : 4;
  std::vector<std::string> paths;
  std::vector<uint32_t> shard;
  auto flush = [&]() {
    stop_if_interrupted();  // between shards: the staging directory goes with the unwinding
    // Six digits sort as numbers: a seventh would put shard 1,000,000 before 200,000 in a glob.
    if (paths.size() > 999'999)
      throw UserError("more than 1,000,000 " + split + " shards of " + std::to_string(spec.shard_tokens) +
                      " tokens: raise --shard-tokens");
    char index[16];
    std::snprintf(index, sizeof index, "%06zu", paths.size());
    std::string path = (fs::path(spec.directory) / (spec.name + "_" + split + "_" + index + ".bin")).string();
    write_file_atomically(path, shard_bytes(shard, width));
    paths.push_back(path);
    shard.clear();
  };
  for (const auto& chunk : chunks) {
    for (std::size_t at = 0; at < chunk.size();) {
      std::size_t take = std::min<std::size_t>(chunk.size() - at, spec.shard_tokens - shard.size());
      shard.insert(shard.end(), chunk.begin() + at, chunk.begin() + at + take);
      at += take;
      if (static_cast<int64_t>(shard.size()) == spec.shard_tokens) flush();
    }
  }
  if (!shard.empty()) flush();
  const std::set<std::string> written(paths.begin(), paths.end());
  const std::regex stale = shard_name(spec.name, split);
  for (const auto& entry : fs::directory_iterator(spec.directory))
    if (std::regex_match(entry.path().filename().string(), stale) && !written.count(entry.path().string()))
      fs::remove(entry.path());
  return paths;
}

std::string staging_directory(const ShardSpec& spec) {
  return (std::filesystem::path(spec.directory) / ("." + spec.name + ".partial")).string();
}

void commit_token_shards(const ShardSpec& spec, const std::string& staging, const std::vector<std::string>& splits) {
  namespace fs = std::filesystem;
  std::vector<std::regex> patterns;
  for (const auto& split : splits) patterns.push_back(shard_name(spec.name, split));
  auto is_shard = [&](const fs::path& path) {
    const std::string file = path.filename().string();
    return std::any_of(patterns.begin(), patterns.end(), [&](const std::regex& p) { return std::regex_match(file, p); });
  };
  std::string at;  // the file being moved or removed, for the message
  try {
    for (const auto& entry : fs::directory_iterator(spec.directory))
      if (is_shard(entry.path())) fs::remove(at = entry.path().string());
    std::vector<fs::path> staged;
    for (const auto& entry : fs::directory_iterator(staging))
      if (is_shard(entry.path())) staged.push_back(entry.path());
    std::sort(staged.begin(), staged.end());
    for (const auto& path : staged) {
      at = path.string();
      fs::rename(path, fs::path(spec.directory) / path.filename());
    }
  } catch (const fs::filesystem_error& e) {
    throw IoError(at + ": " + e.code().message() + " (replacing the earlier run's shards)");
  }
  fsync_directory(spec.directory);
}

std::vector<std::string> shard_names_in(const std::string& directory) {
  static const std::regex any_shard(R"((.+)_(train|val)_\d{6}\.bin)");
  std::set<std::string> names;
  std::error_code missing;
  for (const auto& entry : std::filesystem::directory_iterator(directory, missing)) {
    std::smatch match;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, match, any_shard)) names.insert(match[1].str());
  }
  return {names.begin(), names.end()};
}

}  // namespace ddp
