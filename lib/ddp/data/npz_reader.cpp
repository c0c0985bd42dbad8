#include "ddp/data/npz_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ddp/common/error.h"
#include "ddp/data/npy_reader.h"

namespace ddp {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50, kZip64End = 0x06064b50, kZip64Locator = 0x07064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50, kLocalHeader = 0x04034b50;
constexpr std::size_t kMaxNpyHeader = 1 << 20;

uint64_t little(const char* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = value << 8 | static_cast<unsigned char>(p[i]);
  return value;
}

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw FileError(path + ": cannot open (" + std::strerror(errno) + ")");
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Exactly `n` bytes at `offset`, or FileError.
std::string read_at(int fd, uint64_t offset, std::size_t n, const std::string& path, const std::string& what) {
  std::string bytes(n, '\0');
  std::size_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd, bytes.data() + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw FileError(path + ": cannot read " + what + " (" + std::strerror(errno) + ")");
    if (got == 0) throw FileError(path + ": is cut short inside " + what);
    done += static_cast<std::size_t>(got);
  }
  return bytes;
}

}  // namespace

// A member's bytes in order, inflated when deflated, counted and checked against its CRC at the end.
class NpzFile::Reader {
 public:
  Reader(const std::string& path, const Member& member) : path_(path), member_(member), file_(path) {
    label_ = path + " (member " + member.name + ".npy)";
    std::string local = read_at(file_.get(), member.header_offset, 30, path, "a zip entry header");
    if (little(local.data(), 4) != kLocalHeader) throw FileError(label_ + ": the zip entry header is corrupt");
    at_ = member.header_offset + 30 + little(local.data() + 26, 2) + little(local.data() + 28, 2);
    end_ = at_ + member.compressed_size;
    if (member.method == 8 && inflateInit2(&stream_, -MAX_WBITS) != Z_OK)
      throw FileError(label_ + ": cannot initialise zlib");
  }
  ~Reader() {
    if (member_.method == 8) inflateEnd(&stream_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& label() const { return label_; }

  void read(char* out, uint64_t n) {
    if (done_ + n > member_.size) throw FileError(label_ + ": is cut short (the array needs more bytes than the member holds)");
    if (member_.method == 0) {
      uint64_t got = 0;
      while (got < n) {
        ssize_t r = ::pread(file_.get(), out + got, static_cast<std::size_t>(std::min<uint64_t>(n - got, 1u << 30)),
                            static_cast<off_t>(at_));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) throw FileError(label_ + ": is cut short");
        got += static_cast<uint64_t>(r);
        at_ += static_cast<uint64_t>(r);
      }
    } else {
      inflate_into(out, n);
    }
    crc_ = crc32_z(crc_, reinterpret_cast<const Bytef*>(out), static_cast<z_size_t>(n));
    done_ += n;
  }

  /// Every byte read and the CRC as the archive records it.
  void finish() const {
    if (done_ != member_.size)
      throw FileError(label_ + ": has " + std::to_string(member_.size - done_) + " bytes after the array its header describes");
    if (crc_ != member_.crc) throw FileError(label_ + ": is corrupt (CRC-32 mismatch)");
  }

 private:
  void inflate_into(char* out, uint64_t n) {
    uint64_t produced = 0;
    while (produced < n) {
      if (stream_.avail_in == 0) {
        uint64_t left = end_ - at_;
        if (left == 0) throw FileError(label_ + ": its compressed data is cut short");
        input_ = read_at(file_.get(), at_, static_cast<std::size_t>(std::min<uint64_t>(left, 1 << 20)), path_,
                         "member " + member_.name + ".npy");
        at_ += input_.size();
        stream_.next_in = reinterpret_cast<Bytef*>(input_.data());
        stream_.avail_in = static_cast<uInt>(input_.size());
      }
      uint64_t chunk = std::min<uint64_t>(n - produced, 1u << 30);
      stream_.next_out = reinterpret_cast<Bytef*>(out + produced);
      stream_.avail_out = static_cast<uInt>(chunk);
      int status = inflate(&stream_, Z_NO_FLUSH);
      produced += chunk - stream_.avail_out;
      if (status == Z_STREAM_END && produced < n) throw FileError(label_ + ": its compressed data ends early");
      if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR)
        throw FileError(label_ + ": its compressed data is corrupt (" + (stream_.msg ? stream_.msg : "zlib error") + ")");
    }
  }

  std::string path_;
  const Member& member_;
  Fd file_;
  std::string label_;
  uint64_t at_ = 0, end_ = 0, done_ = 0;
  uint32_t crc_ = 0;
  z_stream stream_{};
  std::string input_;
};

NpzFile::NpzFile(std::string path) : path_(std::move(path)) {
  Fd file(path_);
  struct stat info {};
  if (fstat(file.get(), &info) != 0 || !S_ISREG(info.st_mode)) throw FileError(path_ + ": is not a regular file");
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  // The end record is the last 22 bytes, unless a comment (up to 64 KiB) follows it.
  const uint64_t tail_size = std::min<uint64_t>(size, 22 + 65535);
  std::string tail = read_at(file.get(), size - tail_size, tail_size, path_, "the zip directory");
  std::size_t end = std::string::npos;
  for (std::size_t i = tail.size() >= 22 ? tail.size() - 22 + 1 : 0; i-- > 0;)
    if (little(tail.data() + i, 4) == kEndOfDirectory) {
      end = i;
      break;
    }
  if (end == std::string::npos)
    throw FileError(path_ + ": is not an .npz file (no zip directory; cut short, or not a zip at all)");
  uint64_t entries = little(tail.data() + end + 10, 2), directory_size = little(tail.data() + end + 12, 4),
           directory_at = little(tail.data() + end + 16, 4);
  const uint64_t end_at = size - tail_size + end;
  const bool sentinels = entries == 0xffff || directory_size == 0xffffffffu || directory_at == 0xffffffffu;
  if (sentinels && end_at >= 20 &&
      little(read_at(file.get(), end_at - 20, 4, path_, "the zip directory").data(), 4) == kZip64Locator) {
    std::string locator = read_at(file.get(), end_at - 20, 20, path_, "the zip64 locator");
    const uint64_t record_at = little(locator.data() + 8, 8);
    if (record_at > size || size - record_at < 56) throw FileError(path_ + ": its zip64 directory record points past the end");
    std::string record = read_at(file.get(), record_at, 56, path_, "the zip64 directory");
    if (little(record.data(), 4) != kZip64End) throw FileError(path_ + ": its zip64 directory record is corrupt");
    entries = little(record.data() + 32, 8);
    directory_size = little(record.data() + 40, 8);
    directory_at = little(record.data() + 48, 8);
  }
  if (directory_size > size || directory_at > size - directory_size)
    throw FileError(path_ + ": is cut short (its zip directory points past the end)");
  std::string directory = read_at(file.get(), directory_at, directory_size, path_, "the zip directory");
  std::size_t at = 0;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at + 46 > directory.size() || little(directory.data() + at, 4) != kDirectoryEntry)
      throw FileError(path_ + ": its zip directory is corrupt");
    const char* entry = directory.data() + at;
    uint64_t name_size = little(entry + 28, 2), extra_size = little(entry + 30, 2), comment_size = little(entry + 32, 2);
    if (at + 46 + name_size + extra_size + comment_size > directory.size())
      throw FileError(path_ + ": its zip directory is corrupt");
    Member member;
    member.name = directory.substr(at + 46, name_size);
    if (little(entry + 8, 2) & 1) throw FileError(path_ + ": member " + member.name + " is encrypted");
    member.method = static_cast<uint16_t>(little(entry + 10, 2));
    member.crc = static_cast<uint32_t>(little(entry + 16, 4));
    member.compressed_size = little(entry + 20, 4);
    member.size = little(entry + 24, 4);
    member.header_offset = little(entry + 42, 4);
    // Sizes and offsets past 4 GiB live in the zip64 extra field, in this order, each only if its slot says so.
    const std::size_t extra_end = at + 46 + name_size + extra_size;
    for (std::size_t x = at + 46 + name_size; x + 4 <= extra_end;) {
      uint64_t id = little(directory.data() + x, 2), length = little(directory.data() + x + 2, 2);
      if (x + 4 + length > extra_end) throw FileError(path_ + ": its zip directory is corrupt (an extra field runs past its entry)");
      std::size_t field = x + 4;
      if (id == 1)
        for (uint64_t* slot : {&member.size, &member.compressed_size, &member.header_offset})
          if (*slot == 0xffffffffu && field + 8 <= x + 4 + length) {
            *slot = little(directory.data() + field, 8);
            field += 8;
          }
      x += 4 + length;
    }
    if (member.method != 0 && member.method != 8)
      throw FileError(path_ + ": member " + member.name + " uses zip compression method " + std::to_string(member.method) +
                      " (stored or deflated are read, as numpy writes)");
    if (member.header_offset > size || member.compressed_size > size - member.header_offset ||
        size - member.header_offset - member.compressed_size < 30)
      throw FileError(path_ + ": is cut short (member " + member.name + " runs past the end of the file)");
    // What a member may claim to hold: its stored bytes, or deflate's best ratio (1032:1), no more.
    if ((member.method == 0 && member.size != member.compressed_size) ||
        (member.method == 8 && member.size / 1032 > member.compressed_size + 1))
      throw FileError(path_ + ": member " + member.name + " claims " + std::to_string(member.size) + " bytes from " +
                      std::to_string(member.compressed_size) + " (corrupt)");
    if (member.name.size() > 4 && member.name.compare(member.name.size() - 4, 4, ".npy") == 0)
      member.name.resize(member.name.size() - 4);
    members_.push_back(std::move(member));
    at += 46 + name_size + extra_size + comment_size;
  }
}

std::vector<std::string> NpzFile::names() const {
  std::vector<std::string> names;
  for (const auto& member : members_) names.push_back(member.name);
  return names;
}

bool NpzFile::contains(const std::string& name) const {
  return std::any_of(members_.begin(), members_.end(), [&](const Member& m) { return m.name == name; });
}

const NpzFile::Member& NpzFile::member(const std::string& name) const {
  for (auto m = members_.rbegin(); m != members_.rend(); ++m)  // a repeated name: the last, as np.load reads it
    if (m->name == name) return *m;
  std::string present;
  for (const auto& n : names()) present += (present.empty() ? "" : ", ") + n;
  throw FileError(path_ + ": has no array '" + name + "' (it holds: " + (present.empty() ? "nothing" : present) + ")");
}

std::string NpzFile::read_bytes(const std::string& name) const {
  const Member& m = member(name);
  if (m.size > (1u << 30)) throw FileError(path_ + ": member " + name + " is too large to read whole");
  Reader reader(path_, m);
  std::string bytes(m.size, '\0');
  reader.read(bytes.data(), m.size);
  reader.finish();
  return bytes;
}

torch::Tensor NpzFile::read(const std::string& name) const {
  const Member& m = member(name);
  Reader reader(path_, m);
  // The .npy header first (its length is in bytes 8..12), then the array straight into its tensor.
  std::string header(std::min<uint64_t>(m.size, 12), '\0');
  reader.read(header.data(), header.size());
  if (header.size() == 12 && header.compare(0, 6, "\x93NUMPY") == 0) {
    uint64_t length = header[6] == 1 ? little(header.data() + 8, 2) : little(header.data() + 8, 4);
    uint64_t total = (header[6] == 1 ? 10 : 12) + length;
    if (length > kMaxNpyHeader || total < 12 || total > m.size)
      throw FileError(reader.label() + ": is cut short inside its NPY header");
    header.resize(total);
    reader.read(header.data() + 12, total - 12);
  }
  NpyHeader npy = parse_npy_header(header, static_cast<int64_t>(m.size), reader.label());
  auto array = torch::empty(npy.shape, npy.dtype);
  reader.read(static_cast<char*>(array.data_ptr()), m.size - static_cast<uint64_t>(npy.data_offset));
  reader.finish();
  return array;
}

}  // namespace ddp
