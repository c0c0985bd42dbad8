#pragma once
// A part of a tensor a rank keeps: a box of it (a tensor-parallel slice), or a run of its elements
// in C order (a sharded unit's share), which is a box of the tensor viewed flat.

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

namespace ddp {

/// A box of a tensor, or of the tensor viewed as another shape of the same elements (flat: a run).
struct TensorPart {
  std::vector<int64_t> offsets;  ///< where the box starts, per dimension of the view
  std::vector<int64_t> sizes;    ///< its extent, per dimension
};

/// `part` of `whole` viewed as `view` (the same elements in C order), as a new contiguous tensor.
inline at::Tensor cut_part(const at::Tensor& whole, at::IntArrayRef view, const TensorPart& part) {
  at::Tensor box = whole.reshape(view);
  for (std::size_t d = 0; d < part.sizes.size(); ++d)
    box = box.narrow(static_cast<int64_t>(d), part.offsets[d], part.sizes[d]);
  return box.clone(at::MemoryFormat::Contiguous);
}

/// Makes `part` of some values viewed as `view` alone (a weights file's bytes for it, a table's rows).
using MakePart = std::function<at::Tensor(at::IntArrayRef view, const TensorPart& part)>;

/// A run of `count` elements from `begin` of a matrix of `cols` columns, in C order, as boxes of the
/// matrix: part of a row, whole rows, part of a row (at most three).
inline std::vector<TensorPart> run_as_boxes(int64_t cols, int64_t begin, int64_t count) {
  std::vector<TensorPart> boxes;
  for (int64_t at = begin, end = begin + count; at < end;) {
    const int64_t row = at / cols, col = at % cols;
    if (col != 0 || end - at < cols) {
      const int64_t n = std::min(cols - col, end - at);
      boxes.push_back({{row, col}, {1, n}});
      at += n;
    } else {
      const int64_t rows = (end - at) / cols;
      boxes.push_back({{row, 0}, {rows, cols}});
      at += rows * cols;
    }
  }
  return boxes;
}

}  // namespace ddp
