#include "ddp/common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ddp/common/error.h"

namespace ddp {

void write_file_atomically(const std::string& path, std::string_view data) {
  std::string temporary = path + ".tmp";
  auto fail = [&](const char* what) {
    std::string cause = std::strerror(errno);
    std::remove(temporary.c_str());
    throw FileError("cannot write " + path + ": " + what + ": " + cause);
  };
  int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("open");
  const char* p = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      close(fd);
      fail("write");
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (fsync(fd) != 0) {
    close(fd);
    fail("fsync");
  }
  if (close(fd) != 0) fail("close");
  if (std::rename(temporary.c_str(), path.c_str()) != 0) fail("rename");
  // The rename itself must reach the disk too, or a crash could bring the old name back.
  std::string directory = std::filesystem::path(path).parent_path().string();
  int dir_fd = open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError("cannot read " + path + ": " + std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace ddp
