#include "ddp/data/token_shards.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/data/checksum64.h"
#include "ddp/data/dataset_format.h"
#include "ddp/data/mapped_file_guard.h"
#include "ddp/data/npy_reader.h"

namespace ddp {
namespace {

constexpr int64_t kLlmcHeaderBytes = 1024;  // 256 int32
constexpr int32_t kLlmcMagic16 = 20240520, kLlmcVersion16 = 1;
constexpr int32_t kLlmcMagic32 = 20240801, kLlmcVersion32 = 7;

[[noreturn]] void fail_tokens(const std::string& path, const std::string& cause) { throw FileError(path + ": " + cause); }

int32_t int32_at(const unsigned char* bytes, int index) {
  int32_t value;
  std::memcpy(&value, bytes + 4 * index, 4);
  return value;
}

}  // namespace

TokenShard::TokenShard(const std::string& path, const std::string& token_dtype, const std::string& key) : path_(path) {
  // O_NONBLOCK: a named pipe would block the open until a writer came; it is refused below.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail_tokens(path, std::string("cannot open (") + std::strerror(errno) + ")");
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    fail_tokens(path, "is not a regular file");
  }
  map_size_ = static_cast<std::size_t>(info.st_size);
  if (map_size_ == 0) {
    ::close(fd);
    fail_tokens(path, "is empty: a token file needs at least two tokens");
  }
  void* map = ::mmap(nullptr, map_size_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) fail_tokens(path, std::string("cannot map (") + std::strerror(errno) + ")");
  map_ = static_cast<const unsigned char*>(map);
  ::madvise(map, map_size_, MADV_RANDOM);  // windows are read in the sampler's order
  try {
    auto size = static_cast<int64_t>(map_size_);
    int32_t magic = map_size_ >= 4 ? int32_at(map_, 0) : 0;
    if (magic == kLlmcMagic16 || magic == kLlmcMagic32) {
      if (size < kLlmcHeaderBytes) fail_tokens(path, "is cut short inside its llm.c header (" + std::to_string(size) + " bytes)");
      int32_t version = int32_at(map_, 1);
      int32_t expected = magic == kLlmcMagic16 ? kLlmcVersion16 : kLlmcVersion32;
      if (version != expected)
        fail_tokens(path, "llm.c shard with magic " + std::to_string(magic) + " has version " + std::to_string(version) +
                       ", expected " + std::to_string(expected));
      token_bytes_ = magic == kLlmcMagic16 ? 2 : 4;
      data_offset_ = kLlmcHeaderBytes;
      count_ = int32_at(map_, 2);
      int64_t holds = (size - data_offset_) / token_bytes_;
      if (count_ < 0 || (size - data_offset_) % token_bytes_ != 0 || holds != count_)
        fail_tokens(path, "its llm.c header says " + std::to_string(count_) + " tokens, the file holds " +
                       std::to_string(size - data_offset_) + " bytes of " + std::to_string(token_bytes_) +
                       "-byte tokens after the header");
      format_ = magic == kLlmcMagic16 ? "llm.c uint16" : "llm.c uint32";
    } else if (map_size_ >= 6 && std::memcmp(map_, "\x93NUMPY", 6) == 0) {
      std::string start(reinterpret_cast<const char*>(map_), std::min<std::size_t>(map_size_, (1 << 20) + 12));
      auto refuse = [&](const std::string& what) {
        fail_tokens(path, "a token .npy must be a 1-D array of integers (int8/16/32/64, uint8/16/32); this one " + what);
      };
      auto integer = [](const std::string& kind) {
        return kind == "i1" || kind == "i2" || kind == "i4" || kind == "i8" || kind == "u1" || kind == "u2" || kind == "u4";
      };
      NpyLayout layout = parse_npy_layout(start, size, path, [&](const std::string& kind) {
        if (!integer(kind)) refuse("holds " + kind);
      });
      if (layout.shape.size() != 1) refuse("has " + std::to_string(layout.shape.size()) + " dimensions");
      token_bytes_ = static_cast<int>(layout.item_bytes);
      is_signed_ = layout.kind[0] == 'i';
      data_offset_ = layout.data_offset;
      count_ = layout.shape[0];
      format_ = "npy " + std::string(is_signed_ ? "int" : "uint") + std::to_string(8 * token_bytes_);
    } else {
      if (token_dtype.empty())
        fail_tokens(path, "is not an llm.c token shard (magic " + std::to_string(magic) + ", expected " +
                       std::to_string(kLlmcMagic16) + " or " + std::to_string(kLlmcMagic32) +
                       ") nor an .npy; a headerless file (nanoGPT's train.bin) needs data.token_dtype: uint16 or uint32");
      token_bytes_ = token_dtype == "uint16" ? 2 : 4;
      if (size % token_bytes_ != 0)
        fail_tokens(path, std::to_string(size) + " bytes is not a whole number of " + token_dtype + " tokens");
      count_ = size / token_bytes_;
      format_ = "raw " + token_dtype;
    }
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(map_), map_size_);
    throw;
  }
  guard_mapping(map_, map_size_, path_, key);
}

TokenShard::~TokenShard() {
  unguard_mapping(map_);
  ::munmap(const_cast<unsigned char*>(map_), map_size_);
}

namespace {

// One loop per token width, so the switch is taken once per read, not once per token.
template <typename Stored>
void widen(const unsigned char* at, int64_t n, int64_t* out) {
  for (int64_t i = 0; i < n; ++i, at += sizeof(Stored)) {
    Stored value;
    std::memcpy(&value, at, sizeof(Stored));
    out[i] = static_cast<int64_t>(value);
  }
}

}  // namespace

uint64_t TokenShard::sampled_checksum() const {
  if (sampled_checksum_) return *sampled_checksum_;
  constexpr std::size_t kBlock = 4096, kBlocks = 64;
  Checksum64 sum;
  if (map_size_ <= kBlock * kBlocks) {
    sum.update(map_, map_size_);
  } else {
    const std::size_t last = map_size_ - kBlock;
    for (std::size_t i = 0; i < kBlocks; ++i) sum.update(map_ + last / (kBlocks - 1) * i, kBlock);
    sum.update(map_ + last, kBlock);  // the end exactly, whatever the division left
  }
  sampled_checksum_ = sum.digest();
  return *sampled_checksum_;
}

void TokenShard::read(int64_t first, int64_t n, int64_t* out) const {
  const unsigned char* at = map_ + data_offset_ + first * token_bytes_;
  switch (token_bytes_) {
    case 1: return is_signed_ ? widen<int8_t>(at, n, out) : widen<uint8_t>(at, n, out);
    case 2: return is_signed_ ? widen<int16_t>(at, n, out) : widen<uint16_t>(at, n, out);
    case 4: return is_signed_ ? widen<int32_t>(at, n, out) : widen<uint32_t>(at, n, out);
    default: std::memcpy(out, at, static_cast<std::size_t>(n) * 8);
  }
}

std::pair<int64_t, int64_t> TokenShard::first_out_of(int64_t vocab_size) const {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int64_t> tokens(kChunk);
  for (int64_t first = 0; first < count_; first += kChunk) {
    int64_t n = std::min(kChunk, count_ - first);
    read(first, n, tokens.data());
    for (int64_t i = 0; i < n; ++i)
      if (tokens[i] < 0 || tokens[i] >= vocab_size) return {first + i, tokens[i]};
  }
  return {-1, 0};
}

TokenWindows::TokenWindows(const std::string& pattern, const std::string& key, const std::string& token_dtype,
                           int64_t block_size)
    : block_size_(block_size) {
  std::vector<std::string> paths;
  // A file of that very name is itself, not a pattern: "exp[1]/train.bin" matched exp1/train.bin.
  std::error_code ec;
  if (pattern.find_first_of("*?[") == std::string::npos || std::filesystem::is_regular_file(pattern, ec)) {
    paths.push_back(pattern);
  } else {
    glob_t found{};
    int status = ::glob(pattern.c_str(), 0, nullptr, &found);  // glob sorts its matches
    for (std::size_t i = 0; status == 0 && i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
    ::globfree(&found);
    if (paths.empty()) throw FileError(key + ": " + pattern + " matches no file");
  }
  int64_t total = 0;
  for (const auto& path : paths) {
    auto shard = std::make_unique<TokenShard>(path, token_dtype, key);
    int64_t windows = (shard->tokens() - 1) / block_size_;
    if (windows < 1) {
      skipped_.push_back({path, shard->tokens()});
      continue;
    }
    total += windows;
    windows_.push_back(total);
    shards_.push_back(std::move(shard));
  }
  if (shards_.empty())
    fail_tokens(skipped_.front().path,
                "holds " + std::to_string(skipped_.front().tokens) + " tokens, fewer than one window of model.block_size + 1 = " +
                    std::to_string(block_size_ + 1) +
                    (skipped_.size() > 1 ? " (so do all " + std::to_string(skipped_.size()) + " files that " + pattern +
                                               " matches)" : ""));
}

torch::Tensor TokenWindows::read(const torch::Tensor& indices) const {
  auto index = indices.contiguous();
  const int64_t* wanted = index.data_ptr<int64_t>();
  auto out = torch::empty({index.size(0), block_size_ + 1}, torch::kLong);
  int64_t* rows = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < index.size(0); ++i) {
    auto shard = std::upper_bound(windows_.begin(), windows_.end(), wanted[i]) - windows_.begin();
    int64_t window = wanted[i] - (shard ? windows_[static_cast<std::size_t>(shard) - 1] : 0);
    shards_[static_cast<std::size_t>(shard)]->read(window * block_size_, block_size_ + 1, rows + i * (block_size_ + 1));
  }
  return out;
}

void TokenWindows::check_vocabulary(int64_t vocab_size, const std::string& vocab_key) const {
  for (const auto& shard : shards_) {
    auto [index, value] = shard->first_out_of(vocab_size);
    if (index >= 0)
      fail_tokens(shard->path(), "token " + std::to_string(index) + " (byte offset " + std::to_string(shard->byte_offset(index)) +
                              ") is " + std::to_string(value) + ", outside " + vocab_key + " " + std::to_string(vocab_size) +
                              " (ids 0 to " + std::to_string(vocab_size - 1) + ")");
  }
}

/// Registers "tokens"; called from dataset_format.cpp (Note [Registries]). The
/// causal-LM task reads the shards itself, as windows of its model's block size.
void register_tokens_format(DatasetFormats& formats) { formats.add("tokens").kind = DatasetKind::kTokens; }

}  // namespace ddp
