#include "ddp/launch/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ddp/launch/signals.h"

namespace ddp {
namespace {

void write_all(int fd, const char* text) {
  size_t left = strlen(text);
  while (left > 0) {
    ssize_t n = write(fd, text, left);
    if (n <= 0) return;
    text += n;
    left -= n;
  }
}

// Closes every descriptor above `last_std` except `keep`, between fork and exec (async-signal-safe:
// close_range is one system call; without it, close over the whole table).
void close_above(int last_std, int keep) {
  unsigned first = static_cast<unsigned>(last_std) + 1;
  unsigned kept = static_cast<unsigned>(keep);
  bool done = (kept <= first || syscall(SYS_close_range, first, kept - 1, 0) == 0) &&
              syscall(SYS_close_range, kept + 1, ~0U, 0) == 0;
  if (done) return;
  long limit = sysconf(_SC_OPEN_MAX);
  for (long fd = first; fd < (limit > 0 ? limit : 65536); ++fd)
    if (fd != keep) close(static_cast<int>(fd));
}

// Note [Workers die first]: when the node (or its memory cgroup) runs out of memory the kernel
// kills the process of the highest oom_score, its share of memory plus oom_score_adj. The launcher
// holds little but is the one that says what happened and stops the other ranks; a worker, as large
// as the model makes it, is what ran out. So each worker gets the launcher's oom_score_adj plus
// kWorkerOomScoreAdj: at 200 MiB the kernel chose the launcher (156 MB of RSS) over its workers.
constexpr int kWorkerOomScoreAdj = 300;

// The worker's oom_score_adj line, made before fork (the child may not allocate).
std::string worker_oom_score_adj() {
  int launcher = 0;
  std::ifstream("/proc/self/oom_score_adj") >> launcher;
  return std::to_string(std::min(1000, launcher + kWorkerOomScoreAdj)) + "\n";
}

}  // namespace

SpawnedProcess spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
                             int stdin_fd) {
  int out_pipe[2], err_pipe[2], beat_pipe[2];
  std::vector<int> opened;
  for (int* fds : {out_pipe, err_pipe, beat_pipe}) {
    if (pipe2(fds, O_CLOEXEC) != 0) {
      std::string cause = strerror(errno);
      for (int fd : opened) close(fd);  // the pipes made before this one
      throw std::runtime_error("pipe: " + cause);
    }
    opened.insert(opened.end(), {fds[0], fds[1]});
  }

  // Everything the child touches is prepared before fork: the launcher has threads (the store),
  // so between fork and exec the child may only make async-signal-safe calls.
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t parent = getpid();
  const bool stdin_is_terminal = isatty(STDIN_FILENO);  // asked before fork: the child calls only what is safe there
  const std::string oom_score_adj = worker_oom_score_adj();

  // Signals stay blocked across fork until the child has dropped the launcher's handlers: a
  // SIGTERM reaching the child before exec must not run them (they would report it as the launcher's).
  sigset_t all, previous;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &previous);
  pid_t pid = fork();
  if (pid < 0) {
    std::string cause = strerror(errno);
    sigprocmask(SIG_SETMASK, &previous, nullptr);
    for (int fd : opened) close(fd);
    throw std::runtime_error("fork: " + cause);
  }
  if (pid == 0) {
    for (int sig : kStopSignals) signal(sig, SIG_DFL);
    for (int sig : {SIGCHLD, SIGPIPE, SIGTTIN}) signal(sig, SIG_DFL);  // ignored ones would stay so across exec
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);  // the launcher died before prctl took effect
    // Note [Workers die first]; raising it needs no privilege, and a failure leaves it as it was.
    if (int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); adj >= 0) {
      write_all(adj, oom_score_adj.c_str());
      close(adj);
    }
    // Standard input is the launcher's, as under torchrun (commands piped to pdb), but for a
    // terminal: the worker's process group is not the terminal's, and a read would stop it (SIGTTIN);
    // local rank 0 then reads a pipe the launcher feeds from it (Note [Terminal input]).
    if (stdin_fd >= 0) {
      dup2(stdin_fd, 0);
    } else if (stdin_is_terminal) {
      int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
      dup2(null_in, 0);
    }
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    if (beat_pipe[1] == kWorkerHeartbeatFd)
      fcntl(kWorkerHeartbeatFd, F_SETFD, 0);  // dup2 onto itself would keep close-on-exec
    else
      dup2(beat_pipe[1], kWorkerHeartbeatFd);
    // Nothing else of the launcher's reaches the worker: not the store's internal pipes or sockets
    // (which lack close-on-exec), not a descriptor its own parent leaked into it.
    close_above(2, kWorkerHeartbeatFd);
    execvpe(args[0], args.data(), envp.data());
    // strerror may allocate (it is not async-signal-safe); the static description does not.
    const char* cause = strerrordesc_np(errno);
    write_all(2, "ddprun: cannot execute ");
    write_all(2, args[0]);
    write_all(2, ": ");
    write_all(2, cause ? cause : "unknown error");
    write_all(2, "\n");
    _exit(127);
  }
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  setpgid(pid, pid);  // also here, so the group exists before we might signal it
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(beat_pipe[1]);
  fcntl(beat_pipe[0], F_SETFL, fcntl(beat_pipe[0], F_GETFL) | O_NONBLOCK);
  return {pid, out_pipe[0], err_pipe[0], beat_pipe[0]};
}

char process_state(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* file = std::fopen(path, "r");
  if (!file) return '?';
  char line[512] = {};
  std::size_t n = std::fread(line, 1, sizeof line - 1, file);
  std::fclose(file);
  // "pid (comm) S ...": comm may hold spaces and parentheses, so the state follows the last ')'.
  const char* close = std::strrchr(line, ')');
  return close && close + 2 < line + n ? close[2] : '?';
}

void signal_group(pid_t pid, int signal) {
  if (pid > 0) kill(-pid, signal);
}

bool wait_groups_gone(const std::vector<pid_t>& groups, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    // kill(-g, 0) finds a group while any member lives or awaits reaping; the id is not reused before.
    // A member whose parent went first was adopted here (become_subreaper): reap it, or its zombie
    // keeps the group found.
    for (pid_t group : groups)
      while (group > 0 && waitpid(-group, nullptr, WNOHANG) > 0) {
      }
    bool left = std::any_of(groups.begin(), groups.end(), [](pid_t group) { return group > 0 && kill(-group, 0) == 0; });
    if (!left) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void become_subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }

namespace {

struct Child {
  pid_t pid = -1;
  std::string command;
  bool running = false;  // not a zombie
};

// This process's children, from each /proc/<pid>/stat: "pid (comm) S ppid ...".
std::vector<Child> children_of_self(const std::vector<pid_t>& keep) {
  std::vector<Child> children;
  const pid_t self = getpid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 >= line.size()) continue;
    char state = line[close + 2];
    pid_t parent = static_cast<pid_t>(std::strtol(line.c_str() + close + 4, nullptr, 10));
    pid_t pid = static_cast<pid_t>(std::stol(name));
    if (parent != self || std::find(keep.begin(), keep.end(), pid) != keep.end()) continue;
    children.push_back({pid, line.substr(open + 1, close - open - 1), state != 'Z'});
  }
  return children;
}

// Signals `pid`, and its process group where it leads one (setsid made it): what it started goes too.
void signal_with_group(pid_t pid, int signal) {
  if (getpgid(pid) == pid) kill(-pid, signal);
  kill(pid, signal);
}

}  // namespace

std::vector<std::string> end_adopted_children(const std::vector<pid_t>& keep, std::chrono::milliseconds grace) {
  std::vector<std::string> ended;
  // Rounds: what an ended child leaves behind is adopted in its turn; a few rounds are plenty.
  for (int round = 0; round < 8; ++round) {
    std::vector<Child> children = children_of_self(keep);
    if (children.empty()) break;
    for (const Child& child : children) {
      if (child.running) {
        ended.push_back(std::to_string(child.pid) + " (" + child.command + ")");
        signal_with_group(child.pid, SIGTERM);
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + grace;
    std::vector<pid_t> left;
    for (const Child& child : children) left.push_back(child.pid);
    while (!left.empty()) {
      left.erase(std::remove_if(left.begin(), left.end(), [](pid_t pid) { return waitpid(pid, nullptr, WNOHANG) != 0; }),
                 left.end());
      if (left.empty()) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        for (pid_t pid : left) signal_with_group(pid, SIGKILL);
        for (pid_t pid : left) waitpid(pid, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return ended;
}

void queue_signal(pid_t pid, int signal, int value) {
  union sigval carried {};
  carried.sival_int = value;
  if (pid > 0) sigqueue(pid, signal, carried);
}

std::string signal_name(int signal) {
  const char* abbreviation = sigabbrev_np(signal);
  return abbreviation ? std::string("SIG") + abbreviation : "signal " + std::to_string(signal);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status)) + " (" + signal_name(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::optional<int64_t> out_of_memory_kills(const std::string& vmstat) {
  std::ifstream in(vmstat);
  std::string name;
  int64_t value = 0;
  while (in >> name >> value)
    if (name == "oom_kill") return value;
  return std::nullopt;
}

}  // namespace ddp
