#include "ddp/data/idx_reader.h"

#include "ddp/common/error.h"
#include "ddp/common/text.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp {
namespace {

constexpr int64_t kMaxDims = 8;
constexpr size_t kIdxChunk = 1 << 20;
constexpr int64_t kMaxDeflateRatio = 1032;  // deflate's limit: 258 bytes per 2-bit code, roughly

[[noreturn]] void fail_idx(const std::string& path, const std::string& cause) { throw FileError(path + ": " + cause); }

std::string hex_bytes(const unsigned char* bytes, size_t n) {
  std::string out;
  char buffer[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buffer, sizeof buffer, "%02x", bytes[i]);
    if (i > 0) out += ' ';
    out += buffer;
  }
  return out;
}

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

/// Bytes of a file, inflated on the fly when it is gzip, so a 47 MB image file is decompressed
/// straight into the tensor instead of through an intermediate buffer.
class ByteSource {
 public:
  explicit ByteSource(const std::string& path) : path_(path) {
    std::error_code ignored;
    if (std::filesystem::is_directory(path, ignored)) fail_idx(path_, "cannot read: is a directory");
    file_.reset(std::fopen(path.c_str(), "rb"));
    if (!file_) fail_idx(path_, std::string("cannot open: ") + std::strerror(errno));
    unsigned char magic[2] = {0, 0};
    size_t got = raw_read(magic, 2);
    gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (std::fseek(file_.get(), 0, SEEK_SET) != 0) fail_idx(path_, std::string("cannot seek: ") + std::strerror(errno));
    if (gzip_) {
      if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) fail_idx(path_, "cannot initialise zlib");
      input_.resize(kIdxChunk);
    }
  }
  ~ByteSource() {
    if (gzip_) inflateEnd(&stream_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  /// The most data bytes the rest of the file can yield after `consumed` bytes: the file's size
  /// raw, or deflate's best ratio (1032:1) times it when compressed.
  int64_t max_payload(int64_t consumed) const {
    struct stat info {};
    if (fstat(fileno(file_.get()), &info) != 0) return INT64_MAX;
    if (gzip_) return static_cast<int64_t>(info.st_size) * kMaxDeflateRatio;
    return std::max<int64_t>(0, static_cast<int64_t>(info.st_size) - consumed);
  }

  /// Whether the file is gzip-compressed.
  bool gzip() const { return gzip_; }

  /// Whether a gzip stream ended before its end-of-stream marker and checksum.
  bool gzip_truncated() const { return gzip_truncated_; }

  /// Reads up to n bytes; fewer only at the end of the data.
  size_t read(void* dst, size_t n) {
    return gzip_ ? inflate_read(static_cast<unsigned char*>(dst), n) : raw_read(dst, n);
  }

  /// Counts (and discards) whatever is left.
  uint64_t drain() {
    std::vector<unsigned char> scratch(kIdxChunk);
    uint64_t total = 0;
    while (size_t got = read(scratch.data(), scratch.size())) total += got;
    return total;
  }

 private:
  size_t raw_read(void* dst, size_t n) {
    size_t got = std::fread(dst, 1, n, file_.get());
    if (got < n && std::ferror(file_.get())) fail_idx(path_, std::string("read error: ") + std::strerror(errno));
    return got;
  }

  size_t inflate_read(unsigned char* dst, size_t n) {
    stream_.next_out = dst;
    stream_.avail_out = static_cast<uInt>(n);
    while (stream_.avail_out > 0 && !finished_) {
      if (stream_.avail_in == 0) {
        stream_.avail_in = static_cast<uInt>(raw_read(input_.data(), input_.size()));
        stream_.next_in = input_.data();
        if (stream_.avail_in == 0) {
          gzip_truncated_ = true;
          finished_ = true;
          break;
        }
      }
      int rc = inflate(&stream_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        end_of_member();
      } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) {
        fail_idx(path_, std::string("corrupt gzip data: ") + (stream_.msg ? stream_.msg : "invalid stream"));
      } else if (rc == Z_MEM_ERROR) {
        fail_idx(path_, "out of memory while decompressing");
      }
    }
    return n - stream_.avail_out;
  }

  // gzip allows several members back to back (what `cat a.gz b.gz` makes); anything else after a
  // member is garbage, which gzread would silently ignore.
  void end_of_member() {
    if (stream_.avail_in == 0) {
      stream_.avail_in = static_cast<uInt>(raw_read(input_.data(), input_.size()));
      stream_.next_in = input_.data();
    }
    if (stream_.avail_in == 0) {
      finished_ = true;
      return;
    }
    if (stream_.next_in[0] != 0x1f) {
      uint64_t trailing = stream_.avail_in;
      while (size_t got = raw_read(input_.data(), input_.size())) trailing += got;
      fail_idx(path_, "trailing garbage: " + std::to_string(trailing) + " bytes after the end of the gzip stream");
    }
    inflateReset(&stream_);
  }

  std::string path_;
  FilePtr file_;
  bool gzip_ = false;
  bool gzip_truncated_ = false;
  bool finished_ = false;
  z_stream stream_{};
  std::vector<unsigned char> input_;
};

const char* type_name(unsigned char type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "short";
    case 0x0C: return "int";
    case 0x0D: return "float";
    case 0x0E: return "double";
    default: return nullptr;
  }
}

std::string truncated_hint(const ByteSource& source) {
  return source.gzip_truncated() ? " (the gzip stream ends early)" : "";
}

std::vector<int64_t> read_idx_header(ByteSource& source, const std::string& path) {
  unsigned char magic[4];
  size_t got = source.read(magic, 4);
  if (got == 0) fail_idx(path, "not an IDX file: it is empty");
  if (got < 4) fail_idx(path, "not an IDX file: only " + std::to_string(got) + " bytes, shorter than the 4-byte magic");
  if (magic[0] != 0 || magic[1] != 0) {
    fail_idx(path, "not an IDX file: bad magic bytes " + hex_bytes(magic, 4) + " (expected 00 00 <type> <ndim>)");
  }
  const char* name = type_name(magic[2]);
  if (name == nullptr) fail_idx(path, "not an IDX file: unknown element type 0x" + hex_bytes(magic + 2, 1));
  if (magic[2] != 0x08) {
    fail_idx(path, "unsupported IDX element type 0x" + hex_bytes(magic + 2, 1) + " (" + name +
                   "); only 0x08 (unsigned byte) is supported");
  }
  int64_t ndim = magic[3];
  if (ndim < 1 || ndim > kMaxDims) {
    fail_idx(path, "not an IDX file: " + std::to_string(ndim) + " dimensions (expected 1 to " +
                   std::to_string(kMaxDims) + ")");
  }
  std::vector<unsigned char> raw(4 * ndim);
  got = source.read(raw.data(), raw.size());
  if (got < raw.size()) {
    fail_idx(path, "truncated: header declares " + std::to_string(ndim) + " dimensions but ends after " +
                   std::to_string(4 + got) + " bytes" + truncated_hint(source));
  }
  std::vector<int64_t> dims(ndim);
  for (int64_t i = 0; i < ndim; ++i) {
    const unsigned char* b = &raw[4 * i];
    // Big-endian; the high bit set would be a negative size.
    dims[i] = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | int64_t{b[3]};
    if (b[0] & 0x80) fail_idx(path, "bad IDX header: dimension " + std::to_string(i) + " is negative");
  }
  return dims;
}

}  // namespace

torch::Tensor read_idx(const std::string& path) {
  ByteSource source(path);
  std::vector<int64_t> dims = read_idx_header(source, path);
  int64_t count = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(count, d, &count)) {
      fail_idx(path, "bad IDX header: dims " + format_shape(dims) + " overflow");
    }
  }
  // Checked before allocating: a 1 KB file whose header claims 50M images must not cost 39 GB first.
  int64_t header_bytes = 4 + 4 * static_cast<int64_t>(dims.size());
  if (int64_t most = source.max_payload(header_bytes); count > most)
    fail_idx(path, source.gzip() ? "truncated: the header " + format_shape(dims) + " declares " + std::to_string(count) +
                                   " bytes of data, more than a gzip file of this size can hold"
                             : "truncated: expected " + std::to_string(count) + " bytes of data, found " +
                                   std::to_string(most));
  torch::Tensor tensor = torch::empty(dims, torch::kUInt8);
  auto* data = tensor.data_ptr<uint8_t>();
  int64_t found = 0;
  while (found < count) {
    size_t want = static_cast<size_t>(std::min<int64_t>(count - found, int64_t{1} << 30));
    size_t got = source.read(data + found, want);
    found += static_cast<int64_t>(got);
    if (got < want) break;
  }
  if (found < count) {
    fail_idx(path, "truncated: expected " + std::to_string(count) + " bytes of data, found " + std::to_string(found) +
                   truncated_hint(source));
  }
  if (uint64_t trailing = source.drain()) {
    fail_idx(path, "trailing garbage: " + std::to_string(trailing) + " bytes after the " + std::to_string(count) +
                   " bytes of data that the header " + format_shape(dims) + " declares");
  }
  // The data can all be there with only the gzip checksum cut off; still a damaged file.
  if (source.gzip_truncated()) fail_idx(path, "truncated: the gzip stream ends before its end-of-stream trailer");
  return tensor;
}

std::string find_idx_file(const std::string& dir, const std::string& stem) {
  std::error_code ignored;
  const std::string raw = dir + "/" + stem, gz = raw + ".gz";
  const bool has_raw = std::filesystem::is_regular_file(raw, ignored),
             has_gz = std::filesystem::is_regular_file(gz, ignored);
  // torchvision's MNIST/raw keeps both, the same data: the raw one is read. Two that differ (an
  // older copy, another dataset of the same sizes, as MNIST and Fashion-MNIST are) are refused.
  if (has_raw && has_gz && !torch::equal(read_idx(raw), read_idx(gz)))
    fail_idx(dir, "holds both " + stem + " and " + stem +
                      ".gz, and they differ: which one holds the data meant is "
                      "not for ddprun to guess; remove the other");
  return has_raw ? raw : has_gz ? gz : "";
}

namespace {

std::string find_split_file(const std::string& dir, const std::string& stem, const std::string& what) {
  std::string path = find_idx_file(dir, stem);
  std::error_code ignored;
  for (const std::string& name : {stem, stem + ".gz"})  // was: said missing, as a directory is no file
    if (path.empty() && std::filesystem::is_directory(dir + "/" + name, ignored))
      fail_idx(dir, "its " + what + " " + name + " is a directory, not a file");
  if (path.empty()) fail_idx(dir, "missing " + what + ": looked for " + stem + " and " + stem + ".gz");
  return path;
}

std::string idx_shape(const torch::Tensor& t) { return format_shape(t.sizes().vec()); }

}  // namespace

Dataset load_idx_split(const std::string& dir, const std::string& split) {
  if (split != "train" && split != "test") {
    throw std::invalid_argument("load_idx_split: split must be \"train\" or \"test\", got \"" + split + "\"");
  }
  std::error_code ignored;
  if (!std::filesystem::is_directory(dir, ignored)) {
    fail_idx(dir, "dataset directory does not exist (or is not a directory)");
  }
  const std::string prefix = split == "train" ? "train" : "t10k";
  std::string images_path = find_split_file(dir, prefix + "-images-idx3-ubyte", split + " images");
  std::string labels_path = find_split_file(dir, prefix + "-labels-idx1-ubyte", split + " labels");

  torch::Tensor images = read_idx(images_path);
  if (images.dim() != 3) fail_idx(images_path, "expected 3-D images [N, H, W], got " + idx_shape(images));
  torch::Tensor labels = read_idx(labels_path);
  if (labels.dim() != 1) fail_idx(labels_path, "expected 1-D labels [N], got " + idx_shape(labels));
  if (labels.size(0) != images.size(0)) {
    throw FileError(images_path + " has " + std::to_string(images.size(0)) + " images but " + labels_path +
                    " has " + std::to_string(labels.size(0)) + " labels; the counts must agree");
  }
  Dataset data;
  data.features = images.unsqueeze(1);  // one channel: [N, 1, H, W]
  data.labels = labels.to(torch::kLong);
  data.source = dir + " (" + split + ")";
  return data;
}

}  // namespace ddp
