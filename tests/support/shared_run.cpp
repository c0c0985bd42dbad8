#include "support/shared_run.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "support/subprocess.h"

namespace ddp::test {
namespace {

// Closing the descriptor, on return or on a throw, releases the lock.
class NameLock {
 public:
  explicit NameLock(const std::string& path) : fd_(::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644)) {
    if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0) throw std::runtime_error("shared_run: cannot lock " + path);
  }
  ~NameLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  NameLock(const NameLock&) = delete;
  NameLock& operator=(const NameLock&) = delete;

 private:
  int fd_;
};

}  // namespace

std::string shared_run(const std::string& name, const std::string& recipe,
                       const std::function<void(const std::string& directory)>& make) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(DDP_BIN_DIR).parent_path() / "test-shared-runs";
  fs::create_directories(root);
  const fs::path binary = fs::path(DDP_BIN_DIR) / "ddp-train";
  const std::string made_from = recipe + "\nddp-train " + std::to_string(fs::file_size(binary)) + " " +
                                std::to_string(fs::last_write_time(binary).time_since_epoch().count());
  NameLock lock((root / (name + ".lock")).string());
  const std::string directory = (root / name).string(), mark = (root / (name + ".made")).string();
  if (fs::exists(mark) && read_file(mark) == made_from) return directory;
  fs::remove(mark);
  fs::remove_all(directory);
  make(directory);
  write_file(mark, made_from);
  return directory;
}

}  // namespace ddp::test
