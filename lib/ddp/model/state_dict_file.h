#pragma once
// Reading what Python's torch.save wrote for a state dict. LibTorch's unpickler reads a plain dict
// but not the OrderedDict that `torch.save(model.state_dict(), path)` writes: it turns an OrderedDict
// into None (it expects one only as a tensor's empty backward hooks) and fails an internal assert
// (issue 22, item 12). So the pickle is run here, by a small machine for the opcodes torch.save
// emits, and LibTorch only opens the zip.

#include <torch/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/model/tensor_part.h"

namespace ddp {

/// A tensor of a weights file as its header or pickle describes it, its values read only when asked:
/// a rank that keeps part of the model reads only that part (Note [Deferred initialisation]).
struct StoredTensor {
  std::vector<int64_t> shape;
  torch::ScalarType dtype = torch::kFloat;
  /// The values, read from the file now, in `dtype` (torch.save's: a view of their storage, read once
  /// while any tensor holds it); FileError naming the file when they cannot be (a storage record cut
  /// short, a file that shrank). Keeps the file open while it lives.
  std::function<torch::Tensor()> read;
  /// `part` of the values viewed as `view`, reading only its bytes; null where the format cannot
  /// (torch.save's records are read whole): cut_part(read(), ...) then.
  MakePart read_part;
};
using StoredTensors = std::vector<std::pair<std::string, StoredTensor>>;

/// The entries of a weights file as read_state_dict_file() takes them, every check that needs no
/// values done, and no values read.
StoredTensors open_state_dict_file(const std::string& path);

/// The name → tensor entries of the dict or OrderedDict torch.save wrote to `path`, or of a
/// safetensors file (told apart by their first bytes, not by name), in file order, or of a Hugging
/// Face directory's safetensors shards (Note [Hugging Face directories]); FileError naming `path` and
/// the cause for anything else (neither format, a pickle that is not a dict of tensors, a storage
/// record cut short, a safetensors header that does not check, a shard the index does not match).
std::vector<std::pair<std::string, torch::Tensor>> read_state_dict_file(const std::string& path);

}  // namespace ddp
