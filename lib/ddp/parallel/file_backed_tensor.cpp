#include "ddp/parallel/file_backed_tensor.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ddp/common/error.h"

namespace ddp {
namespace {

// An unlinked file in `dir`: O_TMPFILE where the filesystem has it, else a named one unlinked at once.
int unlinked_file(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  std::string name = dir + "/.ddp-scratch-XXXXXX";
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd >= 0) ::unlink(name.c_str());
  return fd;
}

}  // namespace

torch::Tensor file_backed_empty(at::IntArrayRef sizes, torch::ScalarType dtype, const std::string& dir) {
  int64_t count = 1;
  for (int64_t size : sizes) count *= size;
  const auto bytes = static_cast<std::size_t>(count) * c10::elementSize(dtype);
  if (bytes == 0) return torch::empty(sizes, dtype);
  const int fd = unlinked_file(dir);
  if (fd < 0) throw_output_error("cannot make a scratch file in " + dir + ": " + std::strerror(errno), errno);
  if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    ::close(fd);
    throw_output_error("cannot reserve " + std::to_string(bytes >> 20) + " MiB of scratch space in " + dir + ": " +
                           std::strerror(err),
                       err);
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mapping_errno = errno;
  ::close(fd);  // the mapping keeps the file
  if (data == MAP_FAILED)
    throw_output_error("cannot map a scratch file in " + dir + ": " + std::strerror(mapping_errno), mapping_errno);
  return torch::from_blob(
      data, sizes, [bytes](void* mapped) { ::munmap(mapped, bytes); }, torch::TensorOptions().dtype(dtype));
}

}  // namespace ddp
