#include "ddp/data/image_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "ddp/common/error.h"

namespace ddp {

ImageFile::ImageFile(int fd, std::string path, int64_t offset, int64_t count, int64_t height, int64_t width)
    : fd_(fd), path_(std::move(path)), offset_(offset), count_(count), height_(height), width_(width) {}

ImageFile::~ImageFile() { ::close(fd_); }

torch::Tensor ImageFile::read(const torch::Tensor& indices) const {
  auto wanted = indices.to(torch::kLong).contiguous();
  const int64_t n = wanted.numel();
  const int64_t bytes = height_ * width_;
  auto images = torch::empty({n, height_, width_}, torch::kUInt8);
  auto* out = images.data_ptr<uint8_t>();
  const auto* index = wanted.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (index[i] < 0 || index[i] >= count_)
      throw std::out_of_range("image index " + std::to_string(index[i]) + " outside [0, " + std::to_string(count_) + ")");
    // One pread per image: a page-cache copy, without mapping the file into this process.
    ssize_t got = ::pread(fd_, out + i * bytes, static_cast<std::size_t>(bytes), offset_ + index[i] * bytes);
    if (got != bytes)
      throw FileError(path_ + ": cannot read image " + std::to_string(index[i]) + " (" +
                      (got < 0 ? std::strerror(errno) : "the file was cut short while in use") + ")");
  }
  return images;
}

}  // namespace ddp
