#pragma once
// Starting and signalling worker processes. Each worker leads its own process group, so a stop
// reaches everything it started, and dies with the launcher (PR_SET_PDEATHSIG).

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

/// A started worker: its pid (also its process group id) and the read ends of its output pipes.
struct SpawnedProcess {
  pid_t pid = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int heartbeat_fd = -1;  ///< what the worker writes to its fd kWorkerHeartbeatFd
};

/// The worker's end of its heartbeat pipe (DDPRUN_HEARTBEAT_FD).
constexpr int kWorkerHeartbeatFd = 3;

/// Starts argv with exactly `environment`; stdin is `stdin_fd` where given (Note [Terminal input]),
/// else the launcher's (/dev/null where that is a terminal), stdout and stderr are pipes, and fd 3 is
/// the write end of a heartbeat pipe. An exec failure shows up as exit status 127 with the reason on
/// the worker's stderr.
SpawnedProcess spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
                             int stdin_fd = -1);

/// The kernel's state letter for a process (R running, S sleeping, T stopped, t traced, Z zombie,
/// ...), from /proc/<pid>/stat; '?' when it cannot be read (the process is gone).
char process_state(pid_t pid);

/// Sends `signal` to the process group led by `pid`; a group that is already gone is fine.
void signal_group(pid_t pid, int signal);

/// Waits, at most `limit`, until the process groups led by `groups` (sent SIGKILL already) have no
/// member left, reaped ones included; false when some outlived the limit.
bool wait_groups_gone(const std::vector<pid_t>& groups, std::chrono::milliseconds limit);

/// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER): what a worker
/// started outside its process group (setsid, a daemon's double fork) is re-parented here when its
/// parent ends, not to init, so that end_adopted_children can end it. The workers do not inherit it.
void become_subreaper();

/// Ends this process's children but `keep`: at the end of an attempt, once its workers are reaped,
/// what it adopted. SIGTERM to each and its process group, SIGKILL to what is left after `grace`,
/// each reaped; what they leave is adopted in turn and ended the same way. "pid (command)" of each
/// that was running (one that had exited is only reaped).
std::vector<std::string> end_adopted_children(const std::vector<pid_t>& keep, std::chrono::milliseconds grace);

/// Sends `signal` to the process `pid` alone, carrying `value` (sigqueue(3)), which a handler
/// installed with SA_SIGINFO reads as si_value; a process that is already gone is fine.
void queue_signal(pid_t pid, int signal, int value);

/// "SIGTERM" for 15.
std::string signal_name(int signal);

/// "exit code 7", or "signal 9 (SIGKILL)" for a waitpid status.
std::string describe_wait_status(int status);

/// The launcher's exit code for a waitpid status: the exit code, or 128+N for signal N.
int exit_code_of(int status);

/// How many processes the kernel's out-of-memory killer has ended since boot (/proc/vmstat's
/// oom_kill, Linux 4.13 on); nullopt where the kernel does not count them. A worker ended by
/// SIGKILL while the count rose was, most likely, one of them.
std::optional<int64_t> out_of_memory_kills(const std::string& vmstat = "/proc/vmstat");

}  // namespace ddp
