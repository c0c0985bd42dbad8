#include "ddp/train/dist/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <stdexcept>
#include <utility>

#include "ddp/common/shared_memory_names.h"

namespace ddp {
namespace {

std::runtime_error os_error(const std::string& what, const std::string& name, int error) {
  return std::runtime_error(what + " shared memory " + name + ": " + std::strerror(error));
}

void* map_fd(int fd, std::size_t bytes, const std::string& name) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int error = errno;
  ::close(fd);
  if (data == MAP_FAILED) throw os_error("cannot map", name, error);
  return data;
}

}  // namespace

SharedSegment SharedSegment::create(std::size_t bytes) {
  static std::atomic<unsigned> counter{0};
  std::random_device random;
  std::string name = shared_memory_prefix(::getpid()) + std::to_string(counter++) + "-" + std::to_string(random());
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw os_error("cannot create", name, errno);
  // posix_fallocate allocates the tmpfs pages now: ENOSPC here instead of SIGBUS on first touch.
  int error = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (error != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw os_error("cannot reserve " + std::to_string(bytes >> 10) + " KiB of", name, error);
  }
  SharedSegment segment(name, nullptr, bytes);
  segment.linked_ = true;
  segment.data_ = map_fd(fd, bytes, name);  // on failure the destructor unlinks
  return segment;
}

SharedSegment SharedSegment::open(const std::string& name, std::size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) throw os_error("cannot open", name, errno);
  struct stat info {};
  if (::fstat(fd, &info) != 0 || static_cast<std::size_t>(info.st_size) < bytes) {
    ::close(fd);
    throw std::runtime_error("shared memory " + name + " is smaller than the " + std::to_string(bytes) +
                             " bytes its creator announced");
  }
  return SharedSegment(name, map_fd(fd, bytes, name), bytes);
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      linked_(std::exchange(other.linked_, false)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  std::swap(name_, other.name_);
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  std::swap(linked_, other.linked_);
  return *this;  // `other` releases what this held
}

SharedSegment::~SharedSegment() {
  if (data_ != nullptr) ::munmap(data_, size_);
  unlink();
}

void SharedSegment::unlink() {
  if (linked_) ::shm_unlink(name_.c_str());
  linked_ = false;
}

}  // namespace ddp
