#include "ddp/common/shared_memory_names.h"

#include <sys/mman.h>

#include <filesystem>

namespace ddp {

std::string shared_memory_prefix(pid_t creator) { return "/ddprun-" + std::to_string(creator) + "-"; }

int remove_shared_memory_of(const std::vector<pid_t>& creators) {
  std::vector<std::string> prefixes;  // as file names in /dev/shm
  for (pid_t creator : creators) prefixes.push_back(shared_memory_prefix(creator).substr(1));
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string name = entry.path().filename().string();
    for (const auto& prefix : prefixes)
      if (name.rfind(prefix, 0) == 0 && ::shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace ddp
