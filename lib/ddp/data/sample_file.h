#pragma once
// Samples read on demand from a file (the node's dataset cache, or an NPY file as it is) instead of
// mapped: the file's pages then sit once in the node's page cache and in no rank's resident memory.

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

/// `count` samples of `sample_shape` elements of `dtype`, stored contiguously in a file from `offset`.
class SampleFile {
 public:
  /// Takes ownership of the open descriptor `fd` of `path`.
  SampleFile(int fd, std::string path, int64_t offset, int64_t count, std::vector<int64_t> sample_shape,
             torch::ScalarType dtype);
  ~SampleFile();
  SampleFile(const SampleFile&) = delete;
  SampleFile& operator=(const SampleFile&) = delete;

  int64_t count() const { return count_; }
  const std::string& path() const { return path_; }
  const std::vector<int64_t>& sample_shape() const { return sample_shape_; }
  torch::ScalarType dtype() const { return dtype_; }

  /// Samples `indices` (int64 [n], each in [0, count)) as [n, sample_shape...] of dtype(). Throws
  /// FileError naming the file if it was cut short after opening.
  torch::Tensor read(const torch::Tensor& indices) const;
  /// Samples [first, first + n) into `out` (n * sample bytes), in one read. Throws as read() does.
  void read_range(int64_t first, int64_t n, void* out) const;

 private:
  int fd_;
  std::string path_;
  int64_t offset_, count_;
  std::vector<int64_t> sample_shape_;
  torch::ScalarType dtype_;
  int64_t sample_bytes_;
};

}  // namespace ddp
