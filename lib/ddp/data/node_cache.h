#pragma once
// Files built once per node from a dataset's sources (the IDX cache, the graph cache): the first
// worker writes the file, atomically and under a lock, the others wait and open its result, and
// later runs open it straight away. A change to any source gives the file another name.
//
// Note [Verified once per node]
// A cache file is not trusted for being there: its seal (cache_seal.h) must name this run's
// sources, and its regions must match their checksums. Reading gigabytes on every rank would cost
// what the cache saves, so the checksums are read once per version of the file: the worker that
// verifies it (or builds it: the checksums were taken from the bytes it wrote) records the file's
// device, inode, size, mtime and ctime in "FILE.verified", under the node's lock. The other local
// ranks, and later runs, find that record matching and skip the reading. Any change to the file
// through the filesystem (a write, a copy over it, a rename onto it, a chmod) moves its ctime,
// which no user can set back, so a changed file is verified again before it is used.

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace ddp {

/// The cache directory `data.cache_dir` names ("" → $XDG_CACHE_HOME/ddprun or ~/.cache/ddprun).
std::string resolve_cache_dir(const std::string& configured);

/// "STEM-HASH.EXTENSION", where HASH covers each source's absolute path, inode, size, modification
/// time to the nanosecond and a sampled hash of its content; "" when a source cannot be read.
std::string cache_file_name(const std::string& stem, const std::vector<std::string>& sources, const std::string& extension);

/// The sources as a cache file's seal records them: each one's absolute path, size and
/// modification time, "; "-separated; "" when a source cannot be read.
std::string source_identity(const std::vector<std::string>& sources);

/// The cache file's mode: the sources' read permissions (the cache holds their data), and no more.
mode_t cache_file_mode(const std::string& source);

/// Opens the cache file `path` with `open` (false when it is missing; CacheRejected, cache_seal.h,
/// when it is there but must not be used), and verifies it once (Note [Verified once per node]).
/// If it cannot be used, one worker of the node says why in one line and has `build` write it
/// (write_sealed_cache(path, ..., mode)) while the others wait, then opens it. False,
/// with a warning naming `what`, when the cache cannot be written (the caller then builds in
/// memory); an error from `build` (a broken source) goes on up.
bool open_or_build_cache(const std::string& path, const std::function<bool()>& open,
                         const std::function<void(const std::string& path, mode_t mode)>& build, mode_t mode,
                         const std::string& what);

}  // namespace ddp
