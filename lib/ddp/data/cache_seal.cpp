#include "ddp/data/cache_seal.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ddp/common/atomic_file.h"
#include "ddp/data/checksum64.h"

namespace ddp {
namespace {

constexpr char kSealMagic[8] = {'D', 'D', 'P', 'S', 'E', 'A', 'L', '1'};
constexpr std::size_t kTail = 4 + 8 + sizeof kSealMagic;  // region count, seal bytes, magic
// A seal holds names and paths, not data: anything larger is not a seal.
constexpr uint64_t kMaxSealBytes = 1 << 20;

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// Reads the seal's fields in order, refusing to read past its end.
class SealReader {
 public:
  explicit SealReader(std::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    T value;
    std::memcpy(&value, take(sizeof value).data(), sizeof value);
    return value;
  }
  std::string_view take(std::size_t n) {
    if (n > bytes_.size() - at_) throw CacheRejected("its seal is garbled (a field runs past its end)");
    auto piece = bytes_.substr(at_, n);
    at_ += n;
    return piece;
  }

 private:
  std::string_view bytes_;
  std::size_t at_ = 0;
};

// "a; b" → its first entry that differs from the other's, for a one-line message.
std::string first_difference(const std::string& ours, const std::string& theirs) {
  auto next = [](const std::string& s, std::size_t& at) {
    auto end = s.find("; ", at);
    std::string entry = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? s.size() : end + 2;
    return entry;
  };
  std::size_t a = 0, b = 0;
  while (a < ours.size() || b < theirs.size()) {
    std::string x = next(ours, a), y = next(theirs, b);
    if (x != y) return "it was built from " + (y.empty() ? "fewer sources" : y) + ", not " + (x.empty() ? "that" : x);
  }
  return "it was built from other sources";
}

}  // namespace

void write_sealed_cache(const std::string& path, const std::vector<CacheRegion>& regions, const std::string& sources,
                        mode_t mode) {
  std::vector<StreamedCacheRegion> streamed;
  for (const auto& region : regions)
    streamed.push_back({region.name, [bytes = region.bytes](const ByteSink& sink) { sink(bytes.data(), bytes.size()); }});
  write_sealed_cache(path, streamed, sources, mode);
}

void write_sealed_cache(const std::string& path, const std::vector<StreamedCacheRegion>& regions,
                        const std::string& sources, mode_t mode) {
  write_file_atomically(
      path,
      [&](const ByteSink& file) {
        std::string seal;
        for (const auto& region : regions) {
          Checksum64 checksum;
          uint64_t bytes = 0;
          region.produce([&](const char* data, std::size_t size) {
            checksum.update(data, size);
            bytes += size;
            file(data, size);
          });
          put(seal, static_cast<uint32_t>(region.name.size()));
          seal += region.name;
          put(seal, bytes);
          put(seal, checksum.digest());
        }
        put(seal, static_cast<uint32_t>(sources.size()));
        seal += sources;
        put(seal, static_cast<uint32_t>(regions.size()));
        put(seal, static_cast<uint64_t>(seal.size() + 8 + sizeof kSealMagic));
        seal.append(kSealMagic, sizeof kSealMagic);
        file(seal.data(), seal.size());
      },
      mode);
}

CacheSeal read_cache_seal(int fd) {
  struct stat info {};
  if (fstat(fd, &info) != 0) throw CacheRejected(std::string("cannot stat it (") + std::strerror(errno) + ")");
  const auto size = static_cast<uint64_t>(info.st_size);
  char tail[kTail];
  if (size < kTail || pread(fd, tail, kTail, static_cast<off_t>(size - kTail)) != static_cast<ssize_t>(kTail) ||
      std::memcmp(tail + 12, kSealMagic, sizeof kSealMagic) != 0)
    throw CacheRejected("it has no seal (cut short, or written by a ddprun older than this one's cache format)");
  uint32_t count;
  uint64_t seal_bytes;
  std::memcpy(&count, tail, 4);
  std::memcpy(&seal_bytes, tail + 4, 8);
  if (seal_bytes < kTail || seal_bytes > kMaxSealBytes || seal_bytes > size)
    throw CacheRejected("its seal is garbled (it claims " + std::to_string(seal_bytes) + " bytes)");
  std::string bytes(seal_bytes - kTail, '\0');
  if (pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(size - seal_bytes)) != static_cast<ssize_t>(bytes.size()))
    throw CacheRejected("its seal cannot be read");
  CacheSeal seal;
  seal.payload_bytes = static_cast<int64_t>(size - seal_bytes);
  SealReader reader(bytes);
  int64_t offset = 0;
  for (uint32_t i = 0; i < count; ++i) {
    CacheSeal::Region region;
    region.name = std::string(reader.take(reader.get<uint32_t>()));
    region.offset = offset;
    const auto region_bytes = reader.get<uint64_t>();
    region.checksum = reader.get<uint64_t>();
    if (region_bytes > static_cast<uint64_t>(seal.payload_bytes - offset))
      throw CacheRejected("its seal describes more bytes than the file holds (region " + region.name + ")");
    region.bytes = static_cast<int64_t>(region_bytes);
    offset += region.bytes;
    seal.regions.push_back(std::move(region));
  }
  seal.sources = std::string(reader.take(reader.get<uint32_t>()));
  if (offset != seal.payload_bytes)
    throw CacheRejected("its seal covers " + std::to_string(offset) + " bytes, the file holds " +
                        std::to_string(seal.payload_bytes) + " before it");
  return seal;
}

void check_cache_sources(const CacheSeal& seal, const std::string& sources) {
  if (seal.sources != sources) throw CacheRejected(first_difference(sources, seal.sources));
}

void verify_cache_regions(int fd, const CacheSeal& seal) {
  constexpr int64_t kChunk = 4 << 20;
  std::string buffer(kChunk, '\0');
  for (const auto& region : seal.regions) {
    Checksum64 sum;
    for (int64_t done = 0; done < region.bytes;) {
      const auto want = static_cast<std::size_t>(std::min(kChunk, region.bytes - done));
      ssize_t got = pread(fd, buffer.data(), want, region.offset + done);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw CacheRejected("its " + region.name + " region cannot be read (" +
                            (got < 0 ? std::strerror(errno) : "cut short") + ")");
      sum.update(buffer.data(), static_cast<std::size_t>(got));
      done += got;
    }
    if (sum.digest() != region.checksum)
      throw CacheRejected("its " + region.name + " region does not match its checksum (changed or damaged after it was written)");
  }
}

}  // namespace ddp
