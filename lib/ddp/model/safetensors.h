#pragma once
// Hugging Face's safetensors files, read and written from the format's description (Note
// [safetensors]), so weights move between ddprun and the Python ecosystem without pickles.

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ddp/model/tensor_part.h"

namespace ddp {

// Note [safetensors]: a file is 8 bytes of little-endian header length N, N bytes of a JSON object
// (padded with spaces), then the data. The object maps each tensor's name to {"dtype": "F32" | "F16" |
// "BF16" | ..., "shape": [..], "data_offsets": [begin, end]}, offsets into the data, C order, little
// endian; "__metadata__" maps strings to strings. The format's own validation (safetensors'
// Rust crate, `Metadata::validate`) is kept: sorted by offset the tensors tile the data exactly, with
// no gap or overlap and nothing after, each spanning its shape's elements × its dtype's size, and the
// header is at most 100,000,000 bytes. A reader trusts nothing else: each fault is one FileError
// naming the file, the tensor and what is wrong.

/// One tensor of a safetensors file, as its header describes it.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  ///< the format's name: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL
  torch::ScalarType type = torch::kFloat;  ///< `dtype` as LibTorch names it
  std::vector<int64_t> shape;
  uint64_t begin = 0;  ///< byte offsets into the data section
  uint64_t end = 0;
};

/// A safetensors file, its header checked whole when opened (Note [safetensors]). Each tensor is read
/// on its own, straight into its storage: loading a model holds one tensor more than the model.
/// (pread rather than a mapping: a file that shrinks while it is read is an error, not a SIGBUS.)
class SafetensorsFile {
 public:
  /// FileError naming `path` and the fault, for a file that cannot be read or does not check.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  /// Every tensor, in the order of their data.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  /// The header's __metadata__ (empty when it has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// The tensor `entry` describes, copied out of the file in its own dtype.
  torch::Tensor read(const SafetensorsEntry& entry) const;
  /// `part` of that tensor viewed as `view` (its shape, or [numel] for a run of elements), reading
  /// only its bytes: one read per contiguous run. std::invalid_argument for a part outside the view.
  torch::Tensor read_part(const SafetensorsEntry& entry, c10::IntArrayRef view, const TensorPart& part) const;

 private:
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  int fd_ = -1;
  uint64_t data_offset_ = 0;  // where the data section starts in the file
};

/// Whether `path` starts as a safetensors file does (a header length, then '{'), to tell it from
/// torch.save's zip without trusting its name.
bool looks_like_safetensors(const std::string& path);

/// Writes `tensors` to `path` as safetensors (Note [safetensors]), their data in the order given,
/// `metadata` as __metadata__; atomic, as write_file_atomically. Tensors of any device; FileError for
/// a name given twice or a dtype the format has no name for.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace ddp
