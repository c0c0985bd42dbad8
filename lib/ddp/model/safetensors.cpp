#include "ddp/model/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>

#include "ddp/common/atomic_file.h"
#include "ddp/common/error.h"
#include "ddp/common/text.h"

namespace ddp {

static_assert(std::endian::native == std::endian::little, "safetensors data are little-endian, as this host must be");

namespace {

// The format's limit on the header (safetensors' MAX_HEADER_SIZE), which keeps a corrupt length
// from asking for gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeName {
  const char* name;
  torch::ScalarType type;
};
constexpr DtypeName kDtypes[] = {{"F64", torch::kDouble}, {"F32", torch::kFloat},  {"F16", torch::kHalf},
                                 {"BF16", torch::kBFloat16}, {"I64", torch::kLong}, {"I32", torch::kInt},
                                 {"I16", torch::kShort},  {"I8", torch::kChar},    {"U8", torch::kByte},
                                 {"BOOL", torch::kBool}};

std::string known_dtypes() {
  std::string names;
  for (const auto& d : kDtypes) names += (names.empty() ? "" : ", ") + std::string(d.name);
  return names;
}

const DtypeName* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Reads exactly `size` bytes at `offset`, or says why not: a file that shrank while it was read is
// an error here, where a mapping would take SIGBUS.
void read_exactly(int fd, void* into, uint64_t size, uint64_t offset, const std::string& path) {
  auto* out = static_cast<char*>(into);
  while (size > 0) {
    ssize_t got = ::pread(fd, out, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw FileError(path + ": cannot read: " + std::strerror(errno));
    if (got == 0) throw FileError(path + ": ended early: it shrank while it was read");
    out += got;
    size -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

uint64_t little_endian_u64(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

// One header entry, checked for its own sake; the tiling is checked over all of them.
SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& value, const std::string& where) {
  const std::string tensor = where + ": tensor '" + name + "'";
  if (!value.is_object()) throw FileError(tensor + " is not described by a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) throw FileError(tensor + " has no \"" + key + "\"");
  SafetensorsEntry entry;
  entry.name = name;
  if (!value["dtype"].is_string()) throw FileError(tensor + ": \"dtype\" is not a string");
  entry.dtype = value["dtype"].get<std::string>();
  if (!find_dtype(entry.dtype))
    throw FileError(tensor + " has dtype \"" + entry.dtype + "\", which ddprun does not read (it reads " +
                    known_dtypes() + ")");
  entry.type = find_dtype(entry.dtype)->type;
  const auto& shape = value["shape"];
  if (!shape.is_array()) throw FileError(tensor + ": \"shape\" is not a list");
  for (const auto& size : shape) {
    if (!size.is_number_unsigned() || size.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw FileError(tensor + ": \"shape\" " + shape.dump() + " is not a list of sizes");
    entry.shape.push_back(static_cast<int64_t>(size.get<uint64_t>()));
  }
  const auto& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned() || offsets[0].get<uint64_t>() > offsets[1].get<uint64_t>())
    throw FileError(tensor + ": \"data_offsets\" " + offsets.dump() + " is not [begin, end] with begin <= end");
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  return entry;
}

// The bytes a shape of a dtype spans, or nullopt past 2^64.
std::optional<uint64_t> span_bytes(const SafetensorsEntry& entry) {
  unsigned __int128 bytes = c10::elementSize(find_dtype(entry.dtype)->type);
  for (int64_t size : entry.shape) {
    bytes *= static_cast<uint64_t>(size);
    if (bytes > UINT64_MAX) return std::nullopt;
  }
  return static_cast<uint64_t>(bytes);
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw FileError("cannot read " + path + ": " + std::strerror(errno));
  try {
    struct stat info {};
    if (::fstat(fd_, &info) != 0) throw FileError("cannot read " + path + ": " + std::strerror(errno));
    if (S_ISDIR(info.st_mode)) throw FileError(path + " is a directory, not a safetensors file");
    const auto file_bytes = static_cast<uint64_t>(info.st_size);
    if (file_bytes < 8)
      throw FileError(path + ": " + std::to_string(file_bytes) +
                      " bytes, shorter than a safetensors file's 8-byte header length");
    unsigned char length[8];
    read_exactly(fd_, length, 8, 0, path);
    const uint64_t header_bytes = little_endian_u64(length);
    if (header_bytes > kMaxHeaderBytes)
      throw FileError(path + ": header length " + std::to_string(header_bytes) + " is over the format's limit of " +
                      std::to_string(kMaxHeaderBytes) + " bytes: not a safetensors file, or a corrupt one");
    if (8 + header_bytes > file_bytes)
      throw FileError(path + ": header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                      std::to_string(file_bytes) + " bytes): a truncated or corrupt file");
    std::string header(header_bytes, '\0');
    read_exactly(fd_, header.data(), header_bytes, 8, path);
    if (header.empty() || header.front() != '{')
      throw FileError(path + ": the header does not start with '{': not a safetensors file, or a corrupt one");
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(header);
    } catch (const nlohmann::json::exception& e) {  // the parser's words say where and what
      throw FileError(path + ": the header is not JSON that can be read (" + printable(e.what(), 200) +
                      "): a corrupt file");
    }
    if (!json.is_object()) throw FileError(path + ": the header is not a JSON object: a corrupt file");
    for (const auto& [name, value] : json.items()) {
      if (name == "__metadata__") {
        if (!value.is_object()) throw FileError(path + ": __metadata__ is not a map of strings");
        for (const auto& [key, text] : value.items()) {
          if (!text.is_string()) throw FileError(path + ": __metadata__ '" + key + "' is not a string");
          metadata_[key] = text.get<std::string>();
        }
        continue;
      }
      entries_.push_back(parse_entry(name, value, path));
    }
    // Note [safetensors]: sorted by offset, the tensors tile the data exactly.
    std::stable_sort(entries_.begin(), entries_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    data_offset_ = 8 + header_bytes;
    const uint64_t data_bytes = file_bytes - data_offset_;
    uint64_t expected = 0;
    const SafetensorsEntry* previous = nullptr;
    for (const auto& entry : entries_) {
      const std::string tensor = path + ": tensor '" + entry.name + "'";
      if (entry.end > data_bytes)
        throw FileError(tensor + "'s data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                        "] run past the end of the file's " + std::to_string(data_bytes) +
                        " data bytes: a truncated or corrupt file");
      if (entry.begin < expected)
        throw FileError(tensor + "'s data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                        "] overlap tensor '" + previous->name + "' [" + std::to_string(previous->begin) + ", " +
                        std::to_string(previous->end) + "]");
      if (entry.begin > expected)
        throw FileError(tensor + "'s data start at " + std::to_string(entry.begin) + ", leaving bytes " +
                        std::to_string(expected) + " to " + std::to_string(entry.begin) + " of the data to no tensor");
      auto needed = span_bytes(entry);
      if (!needed || *needed != entry.end - entry.begin)
        throw FileError(tensor + " spans " + std::to_string(entry.end - entry.begin) + " bytes, but its shape " +
                        shape_text(entry.shape) + " of " + entry.dtype + " needs " +
                        (needed ? std::to_string(*needed) : std::string("more than 2^64")));
      expected = entry.end;
      previous = &entry;
    }
    if (expected != data_bytes)
      throw FileError(path + ": " + std::to_string(data_bytes - expected) +
                      " bytes follow the last tensor's data, which no tensor describes: a corrupt file");
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { ::close(fd_); }

torch::Tensor SafetensorsFile::read(const SafetensorsEntry& entry) const {
  torch::Tensor tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(entry.type));
  read_exactly(fd_, tensor.data_ptr(), entry.end - entry.begin, data_offset_ + entry.begin, path_);
  return tensor;
}

torch::Tensor SafetensorsFile::read_part(const SafetensorsEntry& entry, c10::IntArrayRef view,
                                         const TensorPart& part) const {
  const auto dims = view.size();
  int64_t numel = 1;
  for (int64_t size : entry.shape) numel *= size;
  int64_t view_numel = 1;
  for (int64_t size : view) view_numel *= size;
  if (view_numel != numel || part.offsets.size() != dims || part.sizes.size() != dims)
    throw std::invalid_argument("SafetensorsFile::read_part: a view or part that is not of tensor '" + entry.name + "'");
  for (std::size_t d = 0; d < dims; ++d)
    if (part.offsets[d] < 0 || part.sizes[d] < 0 || part.offsets[d] + part.sizes[d] > view[d])
      throw std::invalid_argument("SafetensorsFile::read_part: a part outside tensor '" + entry.name + "'");
  torch::Tensor out = torch::empty(part.sizes, torch::TensorOptions().dtype(entry.type));
  if (out.numel() == 0) return out;
  // The innermost dimensions the part spans whole, and the one outside them, make one run in the
  // file; the dimensions outside that are walked.
  std::size_t outer = dims;  // the part spans dimensions outer.. whole
  while (outer > 0 && part.sizes[outer - 1] == view[outer - 1]) --outer;
  std::vector<int64_t> stride(dims, 1);  // the view's, in elements
  for (std::size_t d = dims; d-- > 1;) stride[d - 1] = stride[d] * view[d];
  const std::size_t run_dim = outer == 0 ? 0 : outer - 1;
  const int64_t element = static_cast<int64_t>(c10::elementSize(entry.type));
  const int64_t run = (dims == 0 ? 1 : part.sizes[run_dim] * stride[run_dim]) * element;
  auto* into = static_cast<char*>(out.data_ptr());
  std::vector<int64_t> index(run_dim, 0);  // over the walked dimensions
  for (;;) {
    int64_t at = dims == 0 ? 0 : part.offsets[run_dim] * stride[run_dim];
    for (std::size_t d = 0; d < run_dim; ++d) at += (part.offsets[d] + index[d]) * stride[d];
    read_exactly(fd_, into, static_cast<uint64_t>(run), data_offset_ + entry.begin + static_cast<uint64_t>(at * element),
                 path_);
    into += run;
    std::size_t d = run_dim;
    while (d > 0 && ++index[d - 1] == part.sizes[d - 1]) index[--d] = 0;
    if (d == 0) break;
  }
  return out;
}

bool looks_like_safetensors(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char start[9];
  const bool read_all = ::pread(fd, start, sizeof start, 0) == static_cast<ssize_t>(sizeof start);
  ::close(fd);
  return read_all && little_endian_u64(start) <= kMaxHeaderBytes && start[8] == '{';
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;  // contiguous CPU copies, alive while the file is written
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, given] : tensors) {
    if (name == "__metadata__" || !names.insert(name).second)
      throw FileError(path + ": cannot write tensor '" + name + "': " +
                      (name == "__metadata__" ? "the name is the header's own" : "the name is given twice"));
    const DtypeName* dtype = nullptr;
    for (const auto& d : kDtypes)
      if (d.type == given.scalar_type()) dtype = &d;
    if (!dtype)
      throw FileError(path + ": cannot write tensor '" + name + "' of " + std::string(c10::toString(given.scalar_type())) +
                      ": safetensors has no name for it here (it takes " + known_dtypes() + ")");
    torch::Tensor cpu = given.detach().to(torch::kCPU).contiguous();
    const auto bytes = static_cast<uint64_t>(cpu.numel()) * cpu.element_size();
    header[name] = {{"dtype", dtype->name}, {"shape", cpu.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(cpu));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data start 8-byte aligned, as safetensors writes them
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  std::vector<std::string_view> pieces = {length, text};
  for (const auto& tensor : data)
    pieces.emplace_back(static_cast<const char*>(tensor.data_ptr()), static_cast<std::size_t>(tensor.nbytes()));
  write_file_atomically(path, pieces);
}

}  // namespace ddp
