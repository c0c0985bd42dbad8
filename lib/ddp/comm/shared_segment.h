#pragma once
// A POSIX shared-memory segment (tmpfs, /dev/shm) that the ranks of one node map together.

#include <cstddef>
#include <string>

namespace ddp {

/// One mapping of a named shared-memory segment, with its open descriptor; both released on destruction.
class SharedSegment {
 public:
  /// Creates a new segment of `bytes` (name unique to this process), reserves its memory so a full
  /// /dev/shm fails here and not later with SIGBUS, and maps it. Throws std::runtime_error.
  static SharedSegment create(std::size_t bytes);
  /// Maps the segment `name` that another rank created. Throws std::runtime_error.
  static SharedSegment open(const std::string& name, std::size_t bytes);

  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();

  /// Removes the name; the memory lives on while any rank keeps it mapped. Call once every rank has
  /// mapped it, so nothing is left in /dev/shm however the run ends.
  void unlink();

  /// Takes an exclusive lock on byte `slot` of the segment for as long as this object lives. The
  /// kernel drops it when the process dies, so the others can tell (see is_locked). Throws
  /// std::runtime_error if the lock cannot be had.
  void lock_byte(int slot);
  /// Whether some mapping still holds the lock on byte `slot`.
  bool is_locked(int slot) const;

  void* data() const { return data_; }
  const std::string& name() const { return name_; }

 private:
  SharedSegment(std::string name, int fd, std::size_t size) : name_(std::move(name)), fd_(fd), size_(size) {}
  void map();

  std::string name_;
  int fd_ = -1;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  bool linked_ = false;
};

}  // namespace ddp
