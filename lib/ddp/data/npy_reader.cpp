#include "ddp/data/npy_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/data/dataset_format.h"

namespace ddp {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;
constexpr std::size_t kMaxHeader = 1 << 20;  // numpy writes a few hundred bytes; this bounds a bad length

[[noreturn]] void fail_npy(const std::string& path, const std::string& cause) {
  throw FileError(path + ": " + cause);
}

// The text after `'key':` in the header dict, up to the end of its value.
std::string dict_value(const std::string& header, const std::string& key, const std::string& path) {
  // Without numpy's padding and closing newline, which split the message over two lines.
  const std::string shown = header.substr(0, header.find_last_not_of(" \n") + 1);
  // numpy reads the header as a Python literal: a key in either quotes (a writer other than numpy's).
  auto at = header.find("'" + key + "'");
  if (at == std::string::npos) at = header.find('"' + key + '"');
  if (at == std::string::npos) fail_npy(path, "the NPY header has no '" + key + "' (header: " + shown + ")");
  at = header.find(':', at);
  if (at == std::string::npos) fail_npy(path, "malformed NPY header: " + shown);
  auto start = header.find_first_not_of(' ', at + 1);
  if (start == std::string::npos) fail_npy(path, "malformed NPY header: " + shown);
  char open = header[start];
  char close = open == '(' ? ')' : open == '[' ? ']' : open == '\'' || open == '"' ? open : 0;
  if (close) {
    auto end = header.find(close, start + 1);
    if (end == std::string::npos) fail_npy(path, "malformed NPY header: " + shown);
    return header.substr(start, end - start + 1);
  }
  auto end = header.find_first_of(",}", start);
  return header.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

// descr is e.g. '<f4': byte order, then kind and item size ("f4"), returned without the order.
std::string element_kind(const std::string& descr, const std::string& path) {
  const bool quoted =
      descr.size() >= 4 && (descr.front() == '\'' || descr.front() == '"') && descr.back() == descr.front();
  if (!quoted) fail_npy(path, "structured dtype " + descr + " is not supported (use a plain numeric array)");
  std::string text = descr.substr(1, descr.size() - 2);
  char order = text[0];
  std::string kind = text.substr(1);
  if (kind == "O" || kind.rfind("O", 0) == 0)
    fail_npy(path, "holds Python objects (object dtype, stored as pickles); save a numeric array instead");
  if (order == '>') fail_npy(path, "is big-endian (" + text + "); save it little-endian, e.g. arr.astype('<" + kind + "')");
  if (order != '<' && order != '|' && order != '=') fail_npy(path, "unknown byte order in dtype " + text);
  auto bytes = kind.size() >= 2 ? parse_int(kind.substr(1)) : std::nullopt;
  if (std::string("biufc").find(kind[0]) == std::string::npos || !bytes || *bytes < 1 || *bytes > 16)
    fail_npy(path, "dtype " + kind + " is not supported (float32, float64, uint8, bool, int32 or int64)");
  return kind;
}

torch::ScalarType dtype_of(const std::string& kind, const std::string& path) {
  if (kind == "f4") return torch::kFloat;
  if (kind == "f8") return torch::kDouble;
  if (kind == "u1") return torch::kUInt8;
  if (kind == "b1") return torch::kBool;  // masks, as numpy saves bool arrays
  if (kind == "i4") return torch::kInt;
  if (kind == "i8") return torch::kLong;
  fail_npy(path, "dtype " + kind + " is not supported (float32, float64, uint8, bool, int32 or int64)");
}

std::vector<int64_t> npy_shape(const std::string& tuple, const std::string& path) {
  if (tuple.size() < 2 || tuple.front() != '(') fail_npy(path, "malformed shape " + tuple + " in the NPY header");
  std::vector<int64_t> shape;
  std::string inner = tuple.substr(1, tuple.size() - 2);
  std::size_t at = 0;
  while (at < inner.size()) {
    auto end = inner.find(',', at);
    std::string item = inner.substr(at, end == std::string::npos ? std::string::npos : end - at);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) {
      if (item.back() == 'L') item.pop_back();  // Python 2's long, as numpy of then wrote (4000L, 784L)
      auto value = parse_int(item);
      if (!value || *value < 0) fail_npy(path, "malformed shape " + tuple + " in the NPY header");
      shape.push_back(*value);
    }
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return shape;
}

struct OpenFile {
  int fd;
  NpyHeader header;
};

OpenFile open_npy(const std::string& path) {
  // O_NONBLOCK: a named pipe would block the open until a writer came; it is refused below.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail_npy(path, std::string("cannot open (") + std::strerror(errno) + ")");
  try {
    struct stat info {};
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) fail_npy(path, "is not a regular file");
    std::string start(static_cast<std::size_t>(std::min<off_t>(info.st_size, kMaxHeader + 12)), '\0');
    ssize_t got = ::pread(fd, start.data(), start.size(), 0);
    if (got < 0) fail_npy(path, std::string("cannot read (") + std::strerror(errno) + ")");
    start.resize(static_cast<std::size_t>(got));
    return {fd, parse_npy_header(start, info.st_size, path)};
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace

NpyLayout parse_npy_layout(const std::string& bytes, int64_t file_size, const std::string& path,
                           const std::function<void(const std::string&)>& check_kind) {
  if (bytes.size() < kMagicSize || bytes.compare(0, kMagicSize, kNpyMagic, kMagicSize) != 0) {
    bool pickle = !bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80;
    fail_npy(path, pickle ? "is a Python pickle, not an NPY file (save arrays with np.save)"
                      : "is not an NPY file (no \\x93NUMPY magic)");
  }
  if (bytes.size() < 10) fail_npy(path, "is cut short inside its NPY header");
  int major = static_cast<unsigned char>(bytes[6]);
  std::size_t length_bytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
  if (length_bytes == 0) fail_npy(path, "has NPY format version " + std::to_string(major) + " (1, 2 or 3 are read)");
  if (bytes.size() < 8 + length_bytes) fail_npy(path, "is cut short inside its NPY header");
  uint64_t header_length = 0;
  for (std::size_t i = 0; i < length_bytes; ++i)
    header_length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  const uint64_t data_offset = 8 + length_bytes + header_length;
  if (header_length > kMaxHeader || data_offset > bytes.size()) fail_npy(path, "is cut short inside its NPY header");
  std::string header = bytes.substr(8 + length_bytes, header_length);

  NpyLayout result;
  result.data_offset = static_cast<int64_t>(data_offset);
  std::string fortran = dict_value(header, "fortran_order", path);
  if (fortran.rfind("True", 0) == 0)
    fail_npy(path, "is in Fortran order; save it in C order (np.ascontiguousarray) so samples are contiguous");
  result.kind = element_kind(dict_value(header, "descr", path), path);
  if (check_kind) check_kind(result.kind);
  result.item_bytes = *parse_int(result.kind.substr(1));
  result.shape = npy_shape(dict_value(header, "shape", path), path);
  if (result.shape.empty()) fail_npy(path, "holds a 0-d array; the first dimension must count samples");

  int64_t expected = result.item_bytes;
  for (int64_t extent : result.shape)
    if (__builtin_mul_overflow(expected, extent, &expected)) fail_npy(path, "claims an impossibly large shape");
  int64_t actual = file_size - result.data_offset;
  if (actual < expected)
    fail_npy(path, "is cut short: its header says " + std::to_string(expected) + " bytes of data, the file holds " +
                   std::to_string(actual));
  if (actual > expected)
    fail_npy(path, "has " + std::to_string(actual - expected) + " bytes after the array its header describes");
  return result;
}

NpyHeader parse_npy_header(const std::string& bytes, int64_t file_size, const std::string& path) {
  NpyLayout layout = parse_npy_layout(bytes, file_size, path, [&](const std::string& kind) { dtype_of(kind, path); });
  return {dtype_of(layout.kind, path), layout.shape, layout.data_offset};
}

std::shared_ptr<SampleFile> open_npy_samples(const std::string& path) {
  OpenFile file = open_npy(path);
  const auto& shape = file.header.shape;
  return std::make_shared<SampleFile>(file.fd, path, file.header.data_offset, shape[0],
                                      std::vector<int64_t>(shape.begin() + 1, shape.end()), file.header.dtype);
}

torch::Tensor read_npy(const std::string& path) {
  auto samples = open_npy_samples(path);
  // An array of no values (an edge list [2, 0]) has nothing to read: reading it row by row made an
  // index of its first extent, 8 TB for a header-only file of shape (10^12, 0).
  const auto& shape = samples->sample_shape();
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    std::vector<int64_t> whole{samples->count()};
    whole.insert(whole.end(), shape.begin(), shape.end());
    return torch::empty(whole, torch::TensorOptions().dtype(samples->dtype()));
  }
  return samples->read(torch::arange(samples->count(), torch::kLong));
}

namespace {

// Int labels become int64 class indices; float ones stay float (float32) and must be finite: an
// infinite target trains to NaN, or (as a class) converts to INT64_MIN. The first one is named.
torch::Tensor checked_labels(torch::Tensor labels, const std::string& source) {
  if (labels.scalar_type() == torch::kInt || labels.scalar_type() == torch::kLong || labels.scalar_type() == torch::kUInt8)
    return labels.to(torch::kLong);
  if (labels.numel() == 0) return labels.to(torch::kFloat);  // "holds no samples" is said by the task
  auto bad = torch::logical_not(torch::isfinite(labels)).reshape({labels.size(0), -1}).any(1).nonzero();
  if (bad.numel() > 0) {
    const int64_t sample = bad[0][0].item<int64_t>();
    const bool nan = torch::isnan(labels[sample]).any().item<bool>();
    throw FileError(source + ": label of sample " + std::to_string(sample) + " is " + (nan ? "NaN" : "infinite") +
                    "; training needs finite labels (fix or drop that sample)");
  }
  // float64 stays float64, as CSV labels are: the loss checks whole-number classes before any
  // rounding (1.00000001 is no class, yet its float32 is 1).
  return labels.scalar_type() == torch::kDouble ? labels : labels.to(torch::kFloat);
}

// data.dataset npy: features read from the file on demand, labels in a file of their own.
Dataset load_npy_dataset(const std::string& features_path, const std::string& labels_path) {
  Dataset data;
  data.feature_file = open_npy_samples(features_path);
  const auto& shape = data.feature_file->sample_shape();
  if (std::find(shape.begin(), shape.end(), 0) != shape.end())
    fail_npy(features_path, "holds samples of no values (each " + format_shape(shape) + "): a sample needs at least one");
  data.source = features_path + " (labels " + labels_path + ")";
  data.labels = checked_labels(read_npy(labels_path), labels_path);
  if (data.labels.size(0) != data.feature_file->count())
    throw FileError(features_path + " holds " + std::to_string(data.feature_file->count()) + " samples (shape [" +
                    std::to_string(data.feature_file->count()) + ", ...] " + format_shape(data.sample_shape()) +
                    " each) but " + labels_path + " holds " + std::to_string(data.labels.size(0)) + " labels");
  return data;
}

}  // namespace

void register_npy_format(DatasetFormats& formats) {
  formats.add("npy").load_splits = [](const DataConfig& config, int64_t) {
    return load_file_splits(config, load_npy_dataset);
  };
}

}  // namespace ddp
