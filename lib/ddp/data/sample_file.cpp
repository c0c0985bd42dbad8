#include "ddp/data/sample_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "ddp/common/error.h"

namespace ddp {

SampleFile::SampleFile(int fd, std::string path, int64_t offset, int64_t count, std::vector<int64_t> sample_shape,
                       torch::ScalarType dtype)
    : fd_(fd), path_(std::move(path)), offset_(offset), count_(count), sample_shape_(std::move(sample_shape)),
      dtype_(dtype) {
  sample_bytes_ = static_cast<int64_t>(c10::elementSize(dtype_));
  for (int64_t extent : sample_shape_) sample_bytes_ *= extent;
}

SampleFile::~SampleFile() { ::close(fd_); }

torch::Tensor SampleFile::read(const torch::Tensor& indices) const {
  auto wanted = indices.to(torch::kLong).contiguous();
  const int64_t n = wanted.numel();
  std::vector<int64_t> shape{n};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  auto samples = torch::empty(shape, dtype_);
  auto* out = static_cast<char*>(samples.data_ptr());
  const auto* index = wanted.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (index[i] < 0 || index[i] >= count_)
      throw std::out_of_range("sample index " + std::to_string(index[i]) + " outside [0, " + std::to_string(count_) + ")");
    // One pread per sample: a page-cache copy, without mapping the file into this process.
    ssize_t got = ::pread(fd_, out + i * sample_bytes_, static_cast<std::size_t>(sample_bytes_),
                          offset_ + index[i] * sample_bytes_);
    if (got != sample_bytes_)
      throw FileError(path_ + ": cannot read sample " + std::to_string(index[i]) + " (" +
                      (got < 0 ? std::strerror(errno) : "the file was cut short while in use") + ")");
  }
  return samples;
}

void SampleFile::read_range(int64_t first, int64_t n, void* out) const {
  if (first < 0 || n < 0 || first + n > count_)
    throw std::out_of_range(path_ + ": samples [" + std::to_string(first) + ", " + std::to_string(first + n) +
                            ") outside [0, " + std::to_string(count_) + ")");
  auto* bytes = static_cast<char*>(out);
  const int64_t total = n * sample_bytes_;
  for (int64_t done = 0; done < total;) {
    ssize_t got = ::pread(fd_, bytes + done, static_cast<std::size_t>(total - done), offset_ + first * sample_bytes_ + done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw FileError(path_ + ": cannot read samples " + std::to_string(first) + ".." + std::to_string(first + n - 1) +
                      " (" + (got < 0 ? std::strerror(errno) : "the file was cut short while in use") + ")");
    done += got;
  }
}

}  // namespace ddp
