#pragma once
// Token files for language models, read in place: llm.c's shards (a 1,024-byte header of 256 int32:
// magic 20240520 version 1 with uint16 tokens, or magic 20240801 version 7 with uint32 tokens, then
// the token count), nanoGPT's headerless train.bin / val.bin (data.token_dtype), and 1-D integer
// .npy arrays. Each shard is mapped read-only and shared, so a node's ranks hold one page-cache copy
// and no private one, whatever the shards' size.
//
// A sample is a window of block_size + 1 tokens: the inputs and, one token on, their next-token
// targets. Window w of a shard starts at token w * block_size, so windows overlap by the one token
// that is the last target of one and the first input of the next (llm.c's loader). Windows do not
// cross shards; they are numbered shard after shard, in the sorted order of the files.

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

/// One token file, mapped.
class TokenShard {
 public:
  /// Opens and checks `path`; `token_dtype` ("uint16" | "uint32" | "" for none given) reads a
  /// headerless file. FileError naming the file and the cause: wrong magic or version, a size
  /// the header's count disagrees with, an empty file, an npy that is not 1-D integers. `key` names
  /// the file's config key in the line a SIGBUS prints should it shrink while mapped
  /// (Note [Files shrinking under a mapping]).
  TokenShard(const std::string& path, const std::string& token_dtype, const std::string& key = "data.path");
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  int64_t tokens() const { return count_; }
  /// The file's size when it was mapped.
  int64_t bytes() const { return static_cast<int64_t>(map_size_); }
  /// What the file is, for the log: "llm.c uint16", "npy int32", "raw uint16".
  const std::string& format() const { return format_; }
  /// Tokens [first, first + n) as int64 into `out`.
  void read(int64_t first, int64_t n, int64_t* out) const;
  /// The first token >= `vocab_size` (or < 0) as {index, value}; index -1 when there is none.
  std::pair<int64_t, int64_t> first_out_of(int64_t vocab_size) const;
  /// XXH64 of up to 64 blocks of 4 KiB spread evenly over the file (the first and the last among
  /// them; a small file whole): what tells a file rewritten at the same size from the one it was,
  /// almost surely, for the cost of 256 KiB read.
  uint64_t sampled_checksum() const;  // computed once
  /// The byte offset in the file of token `index`, for messages.
  int64_t byte_offset(int64_t index) const { return data_offset_ + index * token_bytes_; }

 private:
  std::string path_, format_;
  const unsigned char* map_ = nullptr;
  std::size_t map_size_ = 0;
  int64_t data_offset_ = 0, count_ = 0;
  int token_bytes_ = 0;
  bool is_signed_ = false;
  mutable std::optional<uint64_t> sampled_checksum_;
};

/// The shards a data.path or data.eval_path names, as windows of block_size + 1 tokens.
class TokenWindows {
 public:
  /// A shard of fewer tokens than one window (ddp-tokenize's last may be): skipped, and said by the
  /// caller, as a shard's tokens past its last whole window are.
  struct Skipped {
    std::string path;
    int64_t tokens = 0;
  };

  /// `pattern` is a file or a glob (sorted); `key` names it in messages ("data.path"). FileError
  /// for a glob that matches nothing, or when no shard holds one window.
  TokenWindows(const std::string& pattern, const std::string& key, const std::string& token_dtype, int64_t block_size);

  int64_t size() const { return windows_.empty() ? 0 : windows_.back(); }
  int64_t block_size() const { return block_size_; }
  const std::vector<std::unique_ptr<TokenShard>>& shards() const { return shards_; }
  const std::vector<Skipped>& skipped() const { return skipped_; }
  /// Windows `indices` (int64 [n]) as int64 [n, block_size + 1].
  torch::Tensor read(const torch::Tensor& indices) const;
  /// FileError naming the file and byte offset of the first token id outside [0, vocab_size).
  void check_vocabulary(int64_t vocab_size, const std::string& vocab_key) const;

 private:
  int64_t block_size_;
  std::vector<std::unique_ptr<TokenShard>> shards_;
  std::vector<int64_t> windows_;  // windows_[i]: windows in shards 0..i together
  std::vector<Skipped> skipped_;
};

}  // namespace ddp
