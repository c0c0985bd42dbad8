#include "ddp/launch/watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace ddp {
namespace {

// Messages are fixed-size so a read never sees half of one: +pid watches, -pid forgets.
struct Message {
  int32_t group;
};

[[noreturn]] void watchdog_main(int read_fd, const std::string& orphaned_dir) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) signal(sig, SIG_IGN);
  constexpr int kMax = 4096;
  static pid_t groups[kMax];
  int count = 0;
  Message message;
  while (true) {
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
  for (int i = 0; i < count; ++i) kill(-groups[i], SIGKILL);
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
