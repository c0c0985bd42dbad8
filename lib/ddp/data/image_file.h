#pragma once
// Images read on demand from a file (the node's dataset cache) instead of mapped: the file's pages
// then sit once in the node's page cache and in no rank's resident memory.

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace ddp {

/// uint8 images [count, height, width] stored contiguously in a file from `offset`.
class ImageFile {
 public:
  /// Takes ownership of the open descriptor `fd` of `path`.
  ImageFile(int fd, std::string path, int64_t offset, int64_t count, int64_t height, int64_t width);
  ~ImageFile();
  ImageFile(const ImageFile&) = delete;
  ImageFile& operator=(const ImageFile&) = delete;

  int64_t count() const { return count_; }
  int64_t height() const { return height_; }
  int64_t width() const { return width_; }

  /// Images `indices` (int64 [n], each in [0, count)) as uint8 [n, height, width]. Throws
  /// FileError naming the file if it was cut short after opening.
  torch::Tensor read(const torch::Tensor& indices) const;

 private:
  int fd_;
  std::string path_;
  int64_t offset_, count_, height_, width_;
};

}  // namespace ddp
