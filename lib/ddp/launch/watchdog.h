#pragma once
// A tiny helper process that outlives a SIGKILLed launcher just long enough to kill every worker
// process group, and every process the workers started outside their groups (setsid).
// PR_SET_PDEATHSIG only reaches a worker itself, not what the worker started.

#include <sys/types.h>

#include <string>

namespace ddp {

/// Forks the watchdog; it kills the groups it was told about when the launcher's end of the pipe
/// closes, then removes `orphaned_dir` (the private store directory) if one was given.
class Watchdog {
 public:
  /// Must run before the launcher starts threads (the watchdog child is a plain fork).
  explicit Watchdog(std::string orphaned_dir = "");
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Tells the watchdog about a worker's process group.
  void watch(pid_t group);
  /// The group is gone (reaped and killed): forget it, so a reused id is never hit.
  void forget(pid_t group);
  /// The watchdog's own pid: a child of the launcher that is no worker.
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int write_fd_ = -1;
};

}  // namespace ddp
