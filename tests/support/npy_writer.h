#pragma once
// .npy files as np.save writes them, for tests that make their own arrays (graphs): a version 1.0
// header padded to 64 bytes, then the contiguous little-endian data.

#include <torch/torch.h>

#include <string>

#include "support/subprocess.h"

namespace ddp::test {

inline void write_npy(const std::string& path, const torch::Tensor& array) {
  auto t = array.contiguous();
  std::string descr = t.scalar_type() == torch::kFloat32 ? "<f4"
                      : t.scalar_type() == torch::kInt64 ? "<i8"
                      : t.scalar_type() == torch::kInt32 ? "<i4"
                      : t.scalar_type() == torch::kBool  ? "|b1"
                      : t.scalar_type() == torch::kUInt8 ? "|u1"
                                                         : "<f8";
  std::string shape = "(";
  for (auto d : t.sizes()) shape += std::to_string(d) + ", ";
  if (t.dim() > 1) shape.resize(shape.size() - 2);
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  std::size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::string bytes = "\x93NUMPY";
  bytes += '\x01';
  bytes += '\x00';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  bytes.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  write_file(path, bytes);
}

}  // namespace ddp::test
