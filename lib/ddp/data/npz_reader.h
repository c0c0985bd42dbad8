#pragma once
// NumPy's .npz format, as np.savez, np.savez_compressed and scipy.sparse.save_npz write it: a zip
// archive of .npy members, each stored or deflated. Members are read one at a time, straight from
// the file into the tensor they become, and checked against the archive's CRC-32.

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

/// One .npz file's members. Throws FileError naming the file (and the member) and the cause.
class NpzFile {
 public:
  /// Reads the zip's central directory: not a zip, cut short, or an entry that points outside the file is an error.
  explicit NpzFile(std::string path);

  const std::string& path() const { return path_; }
  /// The arrays' names, as np.load gives them ("feature" for the member "feature.npy").
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;

  /// The array `name`, as read_npy would give it. A missing member is an error that lists the others.
  torch::Tensor read(const std::string& name) const;
  /// The member's .npy bytes as they are (for what read() does not take, such as scipy's `format` string).
  std::string read_bytes(const std::string& name) const;

 private:
  struct Member {
    std::string name;
    uint16_t method = 0;  ///< 0 stored, 8 deflated
    uint32_t crc = 0;
    uint64_t compressed_size = 0, size = 0, header_offset = 0;
  };
  const Member& member(const std::string& name) const;
  // Copies the member's uncompressed bytes [0, n) to `out`, in pieces, through `sink`.
  class Reader;

  std::string path_;
  std::vector<Member> members_;
};

}  // namespace ddp
