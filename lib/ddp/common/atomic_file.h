#pragma once
// Writing a file so that readers see either the old state or the whole new file, never half of it.

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

/// Writes `data` to a new, uniquely named temporary beside `path` (created with O_EXCL, so a
/// planted file or symlink is never followed or overwritten), fsyncs it, gives it `mode`, renames
/// it over `path` and fsyncs the directory. Throws IoError naming `path` and the cause (disk full),
/// FileError for a permission problem (throw_output_error), and removes the temporary.
void write_file_atomically(const std::string& path, std::string_view data, mode_t mode = 0644);
/// The same for a file made of `pieces`, written in order without being joined first (a cache of
/// gigabytes is written from the arrays it holds, not from a copy of them).
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces, mode_t mode = 0644);
/// Where a producer writes a file's bytes, in order.
using ByteSink = std::function<void(const char* data, std::size_t size)>;
/// The same for a file whose bytes `produce` writes into the sink as it makes them (a checkpoint
/// streamed from its archive, never whole in memory); an exception from `produce` removes the temporary.
void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce,
                           mode_t mode = 0644);

/// Opens `path` for appending (created with `mode` if missing) without following a symlink at it;
/// returns the descriptor (close-on-exec). Throws as write_file_atomically does; a symlink is named.
int open_for_append(const std::string& path, bool truncate = false, mode_t mode = 0644);

/// Flushes a directory's entries (a new file or subdirectory) to the disk; best effort.
void fsync_directory(const std::string& directory);

/// Makes `directory` and its parents where missing. FileError naming it when a file stands in the
/// way or permissions forbid it; IoError for another failure (a full disk).
void make_output_directory(const std::string& directory);

/// FileError naming `path` when it is a directory, a named pipe or a device: a data reader's open
/// of a pipe waits for a writer that never comes, and ifstream reads a directory as an error of
/// its own words. A missing path passes, for the reader's own message.
void require_regular_file(const std::string& path);

/// Reads a whole file; FileError naming it when it cannot.
std::string read_whole_file(const std::string& path);

}  // namespace ddp
