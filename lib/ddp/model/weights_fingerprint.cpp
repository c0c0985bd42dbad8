#include "ddp/model/weights_fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "ddp/common/error.h"
#include "ddp/model/hugging_face.h"

namespace ddp {
namespace {

constexpr uint64_t kEnds = 1 << 20;    // bytes read at each end of a file
constexpr uint64_t kBlock = 4096;      // bytes of each block spread over the rest
constexpr uint64_t kBlocks = 64;

// FNV-1a, 64 bits: the same on every rank and every build.
void mix(uint64_t& hash, const char* bytes, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= static_cast<unsigned char>(bytes[i]);
    hash *= 1099511628211ULL;
  }
}

void mix_file(uint64_t& hash, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FileError("cannot read " + path + ": " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    throw FileError("cannot read " + path + ": " + std::strerror(errno));
  }
  const auto size = static_cast<uint64_t>(info.st_size);
  mix(hash, reinterpret_cast<const char*>(&size), sizeof size);
  std::vector<char> buffer;
  auto take = [&](uint64_t offset, uint64_t length) {
    length = std::min(length, size - std::min(size, offset));
    buffer.resize(length);
    ssize_t got = ::pread(fd, buffer.data(), length, static_cast<off_t>(offset));
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      throw FileError("cannot read " + path + ": " + std::strerror(error));
    }
    mix(hash, buffer.data(), static_cast<std::size_t>(got));
  };
  take(0, kEnds);
  take(size > kEnds ? size - kEnds : 0, kEnds);
  for (uint64_t b = 0; b < kBlocks; ++b) take(size / kBlocks * b, kBlock);
  ::close(fd);
}

}  // namespace

std::string weights_fingerprint(const std::string& path) {
  uint64_t hash = 14695981039346656037ULL;
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    const std::string config = path + "/config.json";
    if (std::filesystem::exists(config, error)) mix_file(hash, config);
    for (const auto& file : hugging_face_weight_files(path).files) mix_file(hash, file);
  } else {
    mix_file(hash, path);
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

}  // namespace ddp
