#pragma once
// Token shards in llm.c's format, which data.dataset: tokens reads: a 1,024-byte header of 256
// little-endian int32 (magic, version, token count), then the tokens. Vocabularies up to 65,536
// ids take GPT-2's uint16 layout (magic 20240520, version 1); larger ones llm.c's Llama 3 layout
// (magic 20240801, version 7, uint32).

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

/// Where shards go and how large they are.
struct ShardSpec {
  std::string directory;
  std::string name;                    ///< files are NAME_SPLIT_NNNNNN.bin
  int64_t shard_tokens = 100'000'000;  ///< at most this many tokens a shard
  int64_t vocab_size = 0;              ///< picks the token width
};

/// Writes `chunks`' tokens, in order, as SPLIT's shards, each committed by an atomic rename (no
/// tokens: none), then removes the split's shards of an earlier, longer run (a glob of the split
/// would take them too). Returns the paths written. IoError/FileError naming the file when the disk
/// refuses.
std::vector<std::string> write_token_shards(const ShardSpec& spec, const std::string& split,
                                            const std::vector<std::vector<uint32_t>>& chunks);

/// Where a run writes its shards before they replace the directory's (commit_token_shards):
/// DIRECTORY/.NAME.partial, a directory on the same file system, so that moving them is a rename.
std::string staging_directory(const ShardSpec& spec);

/// Replaces NAME's shards of `splits` in `spec.directory` by those written into `staging`: the
/// earlier run's go first, then each staged one is renamed in (no space needed), so a split never
/// holds shards of two runs. A failure while they were written (a full disk) left the earlier run's
/// as they were. IoError naming the file when one cannot be moved.
void commit_token_shards(const ShardSpec& spec, const std::string& staging, const std::vector<std::string>& splits);

/// The NAMEs of the shards (NAME_train_NNNNNN.bin, NAME_val_NNNNNN.bin) in `directory`, sorted;
/// none for a directory that does not exist.
std::vector<std::string> shard_names_in(const std::string& directory);

}  // namespace ddp
