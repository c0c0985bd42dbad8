#include "ddp/comm/shared_segment.h"

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

// A lock on byte `slot`, owned by the open file description (not the process or thread), so two
// mappings in one process lock independently, and the kernel releases it when the last
// descriptor of that description closes: at the latest, when the process dies.
struct flock byte_lock(int slot) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = slot;
  lock.l_len = 1;
  return lock;
}

}  // namespace

SharedSegment SharedSegment::create(std::size_t bytes) {
  static std::atomic<unsigned> counter{0};
  std::random_device random;
  std::string name = shared_memory_prefix(::getpid()) + std::to_string(counter++) + "-" + std::to_string(random());
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw os_error("cannot create", name, errno);
  SharedSegment segment(name, fd, bytes);
  segment.linked_ = true;  // from here on the destructor unlinks it on failure
  // posix_fallocate allocates the tmpfs pages now: ENOSPC here instead of SIGBUS on first touch.
  if (int error = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); error != 0)
    throw os_error("cannot reserve " + std::to_string(bytes >> 10) + " KiB of", name, error);
  segment.map();
  return segment;
}

SharedSegment SharedSegment::open(const std::string& name, std::size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) throw os_error("cannot open", name, errno);
  SharedSegment segment(name, fd, bytes);
  struct stat info {};
  if (::fstat(fd, &info) != 0 || static_cast<std::size_t>(info.st_size) < bytes)
    throw std::runtime_error("shared memory " + name + " is smaller than the " + std::to_string(bytes) +
                             " bytes its creator announced");
  segment.map();
  return segment;
}

void SharedSegment::map() {
  void* data = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (data == MAP_FAILED) throw os_error("cannot map", name_, errno);
  data_ = data;
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : name_(std::move(other.name_)),
      fd_(std::exchange(other.fd_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      linked_(std::exchange(other.linked_, false)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  std::swap(name_, other.name_);
  std::swap(fd_, other.fd_);
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  std::swap(linked_, other.linked_);
  return *this;  // `other` releases what this held
}

SharedSegment::~SharedSegment() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);  // drops this mapping's byte lock
  unlink();
}

void SharedSegment::unlink() {
  if (linked_) ::shm_unlink(name_.c_str());
  linked_ = false;
}

void SharedSegment::lock_byte(int slot) {
  struct flock lock = byte_lock(slot);
  if (::fcntl(fd_, F_OFD_SETLK, &lock) != 0) throw os_error("cannot lock a byte of", name_, errno);
}

bool SharedSegment::is_locked(int slot) const {
  struct flock probe = byte_lock(slot);
  if (::fcntl(fd_, F_OFD_GETLK, &probe) != 0) return true;  // cannot tell: assume alive
  return probe.l_type != F_UNLCK;
}

}  // namespace ddp
