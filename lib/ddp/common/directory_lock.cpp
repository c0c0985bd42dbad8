#include "ddp/common/directory_lock.h"

#include "ddp/common/hostname.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ddp/common/error.h"

namespace ddp {

namespace {

// What the holder wrote in the lock file, "unknown holder" when nothing.
std::string holder_note(int fd) {
  char holder[256] = {};
  ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
  std::string text(holder, n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? "unknown holder" : text;
}

}  // namespace

std::optional<std::string> DirectoryLock::holder(const std::string& dir) {
  const std::string path = dir + "/.ddprun.lock";
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> held;
  if (flock(fd, LOCK_SH | LOCK_NB) != 0) held = holder_note(fd);
  close(fd);  // drops the shared lock, if taken
  return held;
}

std::string DirectoryLock::in_use(const std::string& dir, const std::string& what, const std::string& holder) {
  return what + ": " + dir + " is in use by another run (" + holder + "); give this run its own " + what +
         ", or wait until that one ends";
}

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& what) {
  std::string path = dir + "/.ddprun.lock";
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_output_error("cannot create " + path + ": " + std::strerror(errno), errno);
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    std::string holder = holder_note(fd_);
    close(fd_);
    throw UserError(in_use(dir, what, holder));
  }
  std::string holder = "pid " + std::to_string(getpid()) + " on " + hostname() + "\n";
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, holder.data(), holder.size(), 0) < 0) {
    // The lock holds without its note; only a refused run's message is poorer.
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace ddp
