#include "ddp/text/token_shard_writer.h"

#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include "ddp/common/atomic_file.h"

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

}  // namespace

std::vector<std::string> write_token_shards(const ShardSpec& spec, const std::string& split,
                                            const std::vector<std::vector<uint32_t>>& chunks) {
  namespace fs = std::filesystem;
  const int width = spec.vocab_size <= kLargestUint16Vocabulary ? 2 : 4;
  std::vector<std::string> paths;
  std::vector<uint32_t> shard;
  auto flush = [&]() {
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
  const std::regex stale(std::regex_replace(spec.name, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") + "_" + split +
                         R"(_\d{6}\.bin)");
  for (const auto& entry : fs::directory_iterator(spec.directory))
    if (std::regex_match(entry.path().filename().string(), stale) && !written.count(entry.path().string()))
      fs::remove(entry.path());
  return paths;
}

}  // namespace ddp
