#pragma once
// A part of a tensor a rank keeps: a box of it (a tensor-parallel slice), or a run of its elements
// in C order (a sharded unit's share), which is a box of the tensor viewed flat.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace ddp {

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

}  // namespace ddp
