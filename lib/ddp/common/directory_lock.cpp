#include "ddp/common/directory_lock.h"

#include "ddp/common/hostname.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ddp/common/error.h"

namespace ddp {

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& what) {
  std::string path = dir + "/.ddprun.lock";
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_output_error("cannot create " + path + ": " + std::strerror(errno), errno);
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[256] = {};
    ssize_t n = pread(fd_, holder, sizeof holder - 1, 0);
    std::string text(holder, n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    close(fd_);
    throw UserError(what + ": " + dir + " is in use by another run (" + (text.empty() ? "unknown holder" : text) +
                    "); give this run its own " + what + ", or wait until that one ends");
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
