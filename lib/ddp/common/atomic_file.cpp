#include "ddp/common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ddp/common/error.h"

namespace ddp {
namespace {

// The umask, read without changing it (umask(2) can only set it, and other threads create files).
mode_t process_umask() {
  static const mode_t mask = [] {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
    return static_cast<mode_t>(022);
  }();
  return mask;
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view data, mode_t mode) {
  write_file_atomically(path, std::vector<std::string_view>{data}, mode);
}

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces, mode_t mode) {
  write_file_atomically(
      path,
      [&pieces](const ByteSink& sink) {
        for (std::string_view data : pieces) sink(data.data(), data.size());
      },
      mode);
}

void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& produce, mode_t mode) {
  std::string temporary = path + ".tmp.XXXXXX";
  bool created = false;
  auto fail = [&](const char* what) {
    int errnum = errno;
    if (created) std::remove(temporary.c_str());
    throw_output_error("cannot write " + path + ": " + what + ": " + std::strerror(errnum), errnum);
  };
  // mkostemp: O_CREAT | O_EXCL under a fresh name, mode 0600; then the mode asked for, less the
  // umask, as open(path, ..., mode) would have given.
  int fd = mkostemp(temporary.data(), O_CLOEXEC);
  if (fd < 0) fail("open");
  created = true;
  if (fchmod(fd, mode & ~process_umask()) != 0) {
    close(fd);
    fail("chmod");
  }
  ByteSink sink = [&](const char* p, std::size_t left) {
    while (left > 0) {
      ssize_t n = write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0) errno = ENOSPC;
        close(fd);
        fd = -1;
        fail("write");
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  };
  try {
    produce(sink);
  } catch (...) {
    if (fd >= 0) close(fd);
    std::remove(temporary.c_str());
    throw;
  }
  if (fsync(fd) != 0) {
    close(fd);
    fail("fsync");
  }
  if (close(fd) != 0) fail("close");
  if (std::rename(temporary.c_str(), path.c_str()) != 0) fail("rename");
  // The rename itself must reach the disk too, or a crash could bring the old name back.
  fsync_directory(std::filesystem::path(path).parent_path().string());
}

void fsync_directory(const std::string& directory) {
  int dir_fd = open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
}

int open_for_append(const std::string& path, bool truncate, mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC | (truncate ? O_TRUNC : 0), mode);
  if (fd < 0) {
    int errnum = errno;
    throw_output_error("cannot write " + path + ": " +
                           (errnum == ELOOP ? std::string("it is a symbolic link, which is not followed")
                                            : std::strerror(errnum)),
                       errnum);
  }
  return fd;
}

std::string read_whole_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) throw FileError(path + " is a directory, not a file");  // reads as ""
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError("cannot read " + path + ": " + std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void require_regular_file(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || status.type() == std::filesystem::file_type::regular) return;  // missing: the reader says so
  if (status.type() == std::filesystem::file_type::directory) throw FileError(path + ": is a directory, not a file");
  throw FileError(path + ": is not a regular file (a named pipe or a device, which a reader of data sets cannot read "
                  "again or seek in)");
}

void make_output_directory(const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (!error && std::filesystem::is_directory(directory, error)) return;
  if (!error || error.value() == EEXIST || error.value() == ENOTDIR) {
    // The file in the way may be the path's own name, or one of the directories above it
    // ("notes.txt/run"): the first that is there and is not a directory.
    std::filesystem::path in_the_way = directory;
    for (std::filesystem::path above = directory; !above.empty() && above != above.parent_path();
         above = above.parent_path()) {
      std::error_code ignored;
      if (std::filesystem::exists(above, ignored) && !std::filesystem::is_directory(above, ignored)) in_the_way = above;
    }
    throw FileError(directory + ": cannot be made a directory: " +
                    (in_the_way == std::filesystem::path(directory)
                         ? std::string("a file of that name is in the way")
                         : "the file " + in_the_way.string() + " is in the way"));
  }
  // No such directory after making it: a file system that makes none there (/proc, /sys), which a
  // restart would meet again.
  if (error.value() == ENOENT)
    throw FileError("cannot make the directory " + directory + ": " + error.message() +
                    " (a file system that makes "
                    "no directories there?)");
  throw_output_error("cannot make the directory " + directory + ": " + error.message(), error.value());
}

}  // namespace ddp
