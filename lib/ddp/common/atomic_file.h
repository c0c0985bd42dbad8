#pragma once
// Writing a file so that readers see either the old state or the whole new file, never half of it.

#include <string>
#include <string_view>

namespace ddp {

/// Writes `data` to `path + ".tmp"`, fsyncs it, renames it over `path` and fsyncs the directory.
/// Throws FileError naming `path` and the cause (disk full, permission) and removes the temporary.
void write_file_atomically(const std::string& path, std::string_view data);

/// Reads a whole file; FileError naming it when it cannot.
std::string read_whole_file(const std::string& path);

}  // namespace ddp
