#pragma once
// NumPy's .npy format, as `np.save` writes it: a header (a Python dict literal giving dtype, order and
// shape), then the raw array. Only what maps onto a tensor without conversion of layout is taken:
// C order, little-endian, numeric dtypes. Everything else is refused, naming the file and the cause.

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/data/sample_file.h"

namespace ddp {

/// What an .npy file holds and where its data starts.
struct NpyHeader {
  torch::ScalarType dtype;     ///< float32 | float64 | uint8 | bool | int32 | int64
  std::vector<int64_t> shape;  ///< the array's shape; shape[0] counts samples
  int64_t data_offset = 0;     ///< bytes before the first element
};

/// An .npy file's element type as numpy spells it, whatever LibTorch can hold: "u2" for uint16 tokens.
struct NpyLayout {
  std::string kind;            ///< numpy's kind and item size, without the byte order: "f4", "u2", "i8"
  int64_t item_bytes = 0;
  std::vector<int64_t> shape;
  int64_t data_offset = 0;
};

/// Parses an .npy header as parse_npy_header does, with any plain numeric dtype; `check_kind`, if
/// given, may refuse the dtype before the size is checked against it.
NpyLayout parse_npy_layout(const std::string& bytes, int64_t file_size, const std::string& path,
                           const std::function<void(const std::string&)>& check_kind = {});

/// Parses an .npy header (`bytes` is the start of the file, at least its whole header; `file_size`
/// is the whole file's). Throws FileError naming `path`: not NPY, Fortran order, big-endian,
/// object or structured dtype (pickles), a 0-d array, or a size that disagrees with the shape.
NpyHeader parse_npy_header(const std::string& bytes, int64_t file_size, const std::string& path);

/// The samples of an .npy file read on demand from the file itself (see sample_file.h): one copy
/// per node, in the page cache. Throws FileError as parse_npy_header does, or if it cannot be read.
std::shared_ptr<SampleFile> open_npy_samples(const std::string& path);

/// A whole .npy array in memory (labels). Throws FileError as open_npy_samples does.
torch::Tensor read_npy(const std::string& path);

}  // namespace ddp
