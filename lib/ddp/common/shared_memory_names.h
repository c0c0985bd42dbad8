#pragma once
// Names of the POSIX shared-memory segments workers create, known to the launcher too: a worker
// killed between creating a segment and unlinking it would otherwise leave it in /dev/shm.

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddp {

/// "/ddprun-<pid>-": how every segment process `creator` makes is named.
std::string shared_memory_prefix(pid_t creator);

/// Unlinks what `creators` (exited workers) left in /dev/shm; returns how many it removed.
int remove_shared_memory_of(const std::vector<pid_t>& creators);

}  // namespace ddp
