#include "ddp/model/zip_checksums.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <vector>

#include "ddp/common/error.h"

namespace ddp {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50, kZip64End = 0x06064b50, kZip64Locator = 0x07064b50,
                   kDirectoryEntry = 0x02014b50;

uint64_t little_endian(const char* at, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(at[i]);
  return value;
}

std::string read_at(std::ifstream& in, uint64_t offset, uint64_t size) {
  std::string bytes(size, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<uint64_t>(in.gcount()) != size) bytes.clear();
  return bytes;
}

}  // namespace

ZipChecksums::ZipChecksums(const std::string& path) : path_(path) {
  auto fail = [&](const std::string& why) { throw FileError(path + ": not a whole torch.save file (" + why + ")"); };
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("cannot be opened");
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  // The end record is the last 22 bytes but for a comment of up to 65,535.
  const uint64_t tail_size = std::min<uint64_t>(file_size, 22 + 65535);
  const std::string tail = read_at(in, file_size - tail_size, tail_size);
  if (tail.size() < 22) fail("too short for a zip");
  std::size_t end = std::string::npos;
  for (std::size_t at = tail.size() - 22;; --at) {
    if (little_endian(tail.data() + at, 4) == kEndOfDirectory) {
      end = at;
      break;
    }
    if (at == 0) break;
  }
  if (end == std::string::npos) fail("no zip directory at its end: cut short?");
  uint64_t entries = little_endian(tail.data() + end + 10, 2);
  uint64_t directory_size = little_endian(tail.data() + end + 12, 4);
  uint64_t directory_at = little_endian(tail.data() + end + 16, 4);
  if (directory_at == 0xffffffff || entries == 0xffff || directory_size == 0xffffffff) {  // zip64: its locator is just before
    const uint64_t locator_at = file_size - tail_size + end - 20;
    const std::string locator = read_at(in, locator_at, 20);
    if (locator.size() != 20 || little_endian(locator.data(), 4) != kZip64Locator) fail("a zip64 directory without its locator");
    const std::string end64 = read_at(in, little_endian(locator.data() + 8, 8), 56);
    if (end64.size() != 56 || little_endian(end64.data(), 4) != kZip64End) fail("a zip64 end record that does not read");
    entries = little_endian(end64.data() + 32, 8);
    directory_size = little_endian(end64.data() + 40, 8);
    directory_at = little_endian(end64.data() + 48, 8);
  }
  if (directory_at > file_size || directory_size > file_size - directory_at) fail("its zip directory lies outside it");
  const std::string directory = read_at(in, directory_at, directory_size);
  if (directory.size() != directory_size) fail("its zip directory cannot be read");
  std::size_t at = 0;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at + 46 > directory.size() || little_endian(directory.data() + at, 4) != kDirectoryEntry)
      fail("a zip directory entry that does not read");
    const uint32_t crc = static_cast<uint32_t>(little_endian(directory.data() + at + 16, 4));
    const std::size_t name_size = little_endian(directory.data() + at + 28, 2);
    const std::size_t extra_size = little_endian(directory.data() + at + 30, 2);
    const std::size_t comment_size = little_endian(directory.data() + at + 32, 2);
    if (at + 46 + name_size > directory.size()) fail("a zip directory entry cut short");
    std::string name = directory.substr(at + 46, name_size);
    // torch.save puts every record in one top folder, named after the file; records are named without it.
    if (auto slash = name.find('/'); slash != std::string::npos) name = name.substr(slash + 1);
    crc_[name] = crc;
    at += 46 + name_size + extra_size + comment_size;
  }
}

void ZipChecksums::check(const std::string& record, const void* data, std::size_t size) const {
  auto found = crc_.find(record);
  if (found == crc_.end()) throw FileError(path_ + ": record " + record + " is not in its zip directory");
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* bytes = static_cast<const Bytef*>(data);
  for (std::size_t done = 0; done < size;) {  // crc32 takes at most a uInt at once
    const std::size_t n = std::min<std::size_t>(size - done, std::numeric_limits<uInt>::max());
    crc = crc32(crc, bytes + done, static_cast<uInt>(n));
    done += n;
  }
  if (static_cast<uint32_t>(crc) != found->second) {
    char text[96];
    std::snprintf(text, sizeof text, " (its CRC-32 is %08x where the zip says %08x)", static_cast<unsigned>(crc),
                  static_cast<unsigned>(found->second));
    throw FileError(path_ + ": damaged: record " + record + " is not what was written" + text);
  }
}

}  // namespace ddp
