#include "ddp/common/made_directories.h"

#include <filesystem>
#include <system_error>

namespace ddp {

std::string first_missing_directory(const std::string& dir) {
  std::error_code ec;
  std::string missing;
  for (auto at = std::filesystem::absolute(dir, ec).lexically_normal();
       !at.empty() && at != at.parent_path() && !std::filesystem::exists(at, ec); at = at.parent_path())
    missing = at.string();
  return missing;
}

void remove_made_parents(const std::string& dir, const std::string& first_made) {
  if (first_made.empty()) return;
  std::error_code ec;
  auto at = std::filesystem::absolute(dir, ec).lexically_normal();
  if (!at.has_filename()) at = at.parent_path();  // "out/": its name, not an empty one
  for (at = at.parent_path(); at.string().size() >= first_made.size() && std::filesystem::remove(at, ec);
       at = at.parent_path()) {
  }
}

}  // namespace ddp
