#pragma once
// Where a piece of a parameter lies in the whole tensor: an offset and a size per dimension, as
// torch's distributed checkpoint describes a chunk. A checkpoint's pieces are boxes, so a shard of
// any layout (a flat run of elements under ZeRO, a row or column block under tensor parallelism, a
// whole tensor) says exactly which elements it holds, and resharding is box intersection.

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

struct TensorBox {
  std::vector<int64_t> offsets;  ///< the first element's index, per dimension
  std::vector<int64_t> sizes;    ///< elements along each dimension
  int64_t numel() const;
  std::string describe() const;  ///< "[2:4, 0:8]"
};

/// A box and where its elements sit in a flat run: `first` elements into it, in row-major order.
struct RunBox {
  TensorBox box;
  int64_t first = 0;
};

/// The boxes that tile elements [begin, begin + numel) of a row-major tensor of `shape`, in order:
/// each is a contiguous part of the run (its row-major order is the run's), at most 2·ndim − 1 of them.
std::vector<RunBox> boxes_of_run(const std::vector<int64_t>& shape, int64_t begin, int64_t numel);

/// The boxes of a whole tensor that elements [begin, begin + numel) of a slice of it hold, in the
/// run's order. The slice (of `slice_shape`) is `slices`, boxes of the whole one after another: one,
/// or several stacked along dimension 0 (a tensor-parallel slice of a fused layer's projections).
std::vector<TensorBox> boxes_of_slice_run(const std::vector<int64_t>& slice_shape, const std::vector<TensorBox>& slices,
                                          int64_t begin, int64_t numel);

/// The box of the whole tensor.
TensorBox whole_box(const std::vector<int64_t>& shape);

/// Where `a` and `b` overlap; nullopt where they do not.
std::optional<TensorBox> box_overlap(const TensorBox& a, const TensorBox& b);

/// `values` (`box`'s elements, shaped like it) narrowed to `part`, a box within `box`: a view.
torch::Tensor narrow_to(const torch::Tensor& values, const TensorBox& box, const TensorBox& part);

}  // namespace ddp
