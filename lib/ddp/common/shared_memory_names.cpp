#include "ddp/common/shared_memory_names.h"

#include <sys/mman.h>

#include <filesystem>

namespace ddp {

std::string shared_memory_prefix(pid_t creator) { return "/ddprun-" + std::to_string(creator) + "-"; }

int remove_shared_memory_of(pid_t creator) {
  const std::string prefix = shared_memory_prefix(creator).substr(1);  // as a file name in /dev/shm
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && ::shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace ddp
