#include "ddp/launch/watchdog.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "ddp/launch/signals.h"

namespace ddp {
namespace {

// Messages are fixed-size so a read never sees half of one: +pid watches, -pid forgets.
struct Message {
  int32_t group;
};

// A process as /proc names it: its pid and start time, which a reused pid does not share.
struct ProcessId {
  pid_t pid = 0;
  unsigned long long start = 0;  // clock ticks after boot
  bool operator<(const ProcessId& other) const { return pid < other.pid || (pid == other.pid && start < other.start); }
};

// /proc/PID/stat's parent and start time; false if it is gone.
bool read_stat(pid_t pid, pid_t& parent, unsigned long long& start) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');  // "pid (comm) state ppid ...": comm may hold spaces and ')'
  if (close == std::string::npos) return false;
  int ppid = 0;
  // After the comm: state, ppid, then 17 fields up to starttime (proc(5)'s field 22).
  if (std::sscanf(stat.c_str() + close + 1, " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                                            "%*d %llu", &ppid, &start) != 2)
    return false;
  parent = ppid;
  return true;
}

// Every living process descended from one of `roots`, from /proc's parent links.
std::vector<ProcessId> descendants(const pid_t* roots, int count) {
  std::multimap<pid_t, ProcessId> children;  // by parent
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    ProcessId id{static_cast<pid_t>(std::stol(name)), 0};
    pid_t parent = 0;
    if (read_stat(id.pid, parent, id.start)) children.emplace(parent, id);
  }
  std::vector<ProcessId> found;
  std::vector<pid_t> frontier(roots, roots + count);
  while (!frontier.empty()) {
    pid_t parent = frontier.back();
    frontier.pop_back();
    auto [first, last] = children.equal_range(parent);
    for (auto it = first; it != last; ++it) {
      found.push_back(it->second);
      frontier.push_back(it->second.pid);
    }
  }
  return found;
}

// Note [Strays after a SIGKILL]: a worker's child that left its group (setsid, a daemon) is out of
// reach of the group's kill. While the launcher lives it adopts such children (a subreaper) and ends
// them; once it is SIGKILLed, the workers die of their death signal at once, and their children's
// parent becomes init, no longer known as theirs. So the watchdog looks for the workers'
// descendants every second while the launcher lives, and at its end kills those it found that still
// run (the same start time: not a pid reused since).
[[noreturn]] void watchdog_main(int read_fd, const std::string& orphaned_dir) {
  for (int sig : kStopSignals) signal(sig, SIG_IGN);  // Slurm signals every process of the step
  constexpr int kMax = 4096;
  static pid_t groups[kMax];
  int count = 0;
  std::set<ProcessId> seen;
  auto still_runs = [](const ProcessId& id) {
    pid_t parent = 0;
    unsigned long long start = 0;
    return read_stat(id.pid, parent, start) && start == id.start;  // not ended, nor another process now
  };
  auto look = [&] {  // those found now, and those found before that still run (no longer the workers' children)
    std::vector<ProcessId> found = descendants(groups, count);
    std::set<ProcessId> now(found.begin(), found.end());
    for (const ProcessId& id : seen)
      if (still_runs(id)) now.insert(id);
    seen = std::move(now);
  };
  Message message;
  while (true) {
    pollfd ready{read_fd, POLLIN, 0};
    int polled = poll(&ready, 1, 1000);
    if (polled < 0 && errno == EINTR) continue;
    if (polled == 0) {
      look();
      continue;
    }
    ssize_t n = read(read_fd, &message, sizeof message);
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof message) break;  // EOF: the launcher is gone, however it died
    if (message.group > 0 && count < kMax) {
      groups[count++] = message.group;
    } else if (message.group < 0) {
      for (int i = 0; i < count; ++i)
        if (groups[i] == -message.group) groups[i] = groups[--count];
    }
  }
  look();  // those the workers still hold, which the group kill below would orphan
  for (int i = 0; i < count; ++i) kill(-groups[i], SIGKILL);
  for (const ProcessId& id : seen) {
    if (!still_runs(id)) continue;
    if (getpgid(id.pid) == id.pid) kill(-id.pid, SIGKILL);  // a group of its own (setsid): what it started too
    kill(id.pid, SIGKILL);
  }
  // Whenever the launcher's end closes: at its normal exit (the PrivateStoreDir's destructor may
  // find it gone) and, above all, after a SIGKILL, when nobody else would.
  if (!orphaned_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(orphaned_dir, ignored);
  }
  _exit(0);
}

}  // namespace

Watchdog::Watchdog(std::string orphaned_dir) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("watchdog pipe: ") + strerror(errno));
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error(std::string("watchdog fork: ") + strerror(errno));
  if (pid_ == 0) {
    // A group of its own: `kill -9 -- -PGID` of the launcher's group must leave the one process
    // that cleans up after a killed launcher (Note [Store directory owner]).
    setpgid(0, 0);
    close(fds[1]);
    // Only the read end stays open, so EOF means the launcher (the single writer) is gone.
    // Nor does it hold the console: whoever reads the launcher's output sees EOF when the launcher exits.
    int null_fd = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) dup2(null_fd, fd);
    for (int fd = 3; fd < 1024; ++fd)
      if (fd != fds[0]) close(fd);
    watchdog_main(fds[0], orphaned_dir);
  }
  close(fds[0]);
  write_fd_ = fds[1];
}

Watchdog::~Watchdog() {
  close(write_fd_);
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void Watchdog::watch(pid_t group) {
  Message message{static_cast<int32_t>(group)};
  [[maybe_unused]] ssize_t n = write(write_fd_, &message, sizeof message);
}

void Watchdog::forget(pid_t group) {
  Message message{static_cast<int32_t>(-group)};
  [[maybe_unused]] ssize_t n = write(write_fd_, &message, sizeof message);
}

}  // namespace ddp
