#pragma once
// Files built once per node from a dataset's sources (the IDX cache, the graph cache): the first
// worker writes the file, atomically and under a lock, the others wait and open its result, and
// later runs open it straight away. A change to any source gives the file another name.

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

/// The cache file's mode: the sources' read permissions (the cache holds their data), and no more.
mode_t cache_file_mode(const std::string& source);

/// Opens the cache file `path` with `open` (true when it holds what it should); if it cannot,
/// one worker of the node has `build` write it (atomically: write_file_atomically(path, ..., mode))
/// while the others wait, then opens it. False,
/// with a warning naming `what`, when the cache cannot be written (the caller then builds in
/// memory); an error from `build` (a broken source) goes on up.
bool open_or_build_cache(const std::string& path, const std::function<bool()>& open,
                         const std::function<void(const std::string& path, mode_t mode)>& build, mode_t mode,
                         const std::string& what);

}  // namespace ddp
