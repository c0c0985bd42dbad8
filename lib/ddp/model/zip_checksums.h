#pragma once
// Note [torch.save's checksums]: a torch.save file is a zip whose every record carries a CRC-32,
// but LibTorch builds its zip reader with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS, so a flipped bit
// in a model.pt loads as a wrong weight, silently. The CRCs are read here from the zip's central
// directory, and each record is checked as it is read.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace ddp {

/// The CRC-32 of each record of a torch.save file, by its name within the archive ("data.pkl",
/// "data/0"), as its central directory says them.
class ZipChecksums {
 public:
  /// Reads `path`'s central directory; FileError naming `path` when it has none that reads.
  explicit ZipChecksums(const std::string& path);

  /// FileError naming the file and `record` when `size` bytes at `data` are not what was written.
  void check(const std::string& record, const void* data, std::size_t size) const;

 private:
  std::string path_;
  std::map<std::string, uint32_t> crc_;  // by name, the archive's top folder left out
};

}  // namespace ddp
