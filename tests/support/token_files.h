#pragma once
// Token shards in llm.c's format, written byte by byte from its format description, of text every
// Debian system has (so no package's corpus is needed).

// Include it after Catch, as every test file does (torch.h, #undef CHECK, catch.hpp).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "support/subprocess.h"

namespace ddp::test {

inline constexpr const char* kText = "/usr/share/common-licenses/GPL-3";  // base-files: on every Debian system

/// An llm.c shard: 256 little-endian int32 (magic, version, token count, then zeros), then the
/// tokens as uint16 (version 1) or uint32 (version 7).
inline std::string llmc_shard(const std::vector<int64_t>& tokens, int32_t magic = 20240520, int32_t version = 1,
                              int64_t claimed = -1) {
  int width = version == 7 ? 4 : 2;
  std::string bytes(1024 + tokens.size() * width, '\0');
  int32_t header[3] = {magic, version, static_cast<int32_t>(claimed >= 0 ? claimed : tokens.size())};
  std::memcpy(bytes.data(), header, sizeof header);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    uint32_t v = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < width; ++b) bytes[1024 + i * width + b] = static_cast<char>((v >> (8 * b)) & 0xff);
  }
  return bytes;
}

/// The license's bytes: the first 90% to train on, the rest held out.
inline std::pair<std::vector<int64_t>, std::vector<int64_t>> text_tokens() {
  std::string text = read_file(kText);
  REQUIRE(text.size() > 30000);
  std::vector<int64_t> all(text.begin(), text.end());
  for (auto& t : all) t = static_cast<unsigned char>(t);
  auto cut = all.begin() + static_cast<std::ptrdiff_t>(all.size() * 9 / 10);
  return {{all.begin(), cut}, {cut, all.end()}};
}

/// The license's bytes as DIR/train.bin and DIR/val.bin, and the config's data: line that reads them.
inline std::string text_data_section(const TempDir& dir) {
  auto [train, val] = text_tokens();
  write_file(dir.file("train.bin"), llmc_shard(train));
  write_file(dir.file("val.bin"), llmc_shard(val));
  return "data: {dataset: tokens, path: " + dir.file("train.bin") + ", eval_path: " + dir.file("val.bin") + "}\n";
}

}  // namespace ddp::test
