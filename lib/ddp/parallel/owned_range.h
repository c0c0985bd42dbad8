#pragma once
// A run of one parameter's elements whose value and optimizer state this rank keeps: the unit a
// sharded checkpoint saves and restores (checkpoint_format.h), whatever the layout.

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ddp/parallel/tensor_box.h"

namespace ddp {

struct OwnedRange {
  std::size_t parameter = 0;  ///< index in the plan's parameters (prepare_model's list)
  int64_t begin = 0;          ///< its first element in the parameter's logical (row-major) order
  /// Its elements, in this rank's copy, which restoring writes through: a 1-D piece of a flat shard,
  /// or a whole parameter (any memory layout; its elements in logical order).
  torch::Tensor value;
  torch::Tensor stepped;      ///< the tensor the optimizer steps for them, whose state is theirs
  /// Where set, what `value` holds instead of a run: these boxes of the whole parameter, one after
  /// another in its row-major order (a tensor-parallel slice: a row or column block, or one block
  /// per projection of a fused layer). `begin` is then 0.
  std::vector<TensorBox> boxes;
};

/// The boxes of the whole parameter (of `shape`) that `range` holds, each with where its elements
/// begin in range.value's row-major order.
inline std::vector<RunBox> boxes_of(const OwnedRange& range, const std::vector<int64_t>& shape) {
  if (range.boxes.empty()) return boxes_of_run(shape, range.begin, range.value.numel());
  std::vector<RunBox> runs;
  int64_t first = 0;
  for (const TensorBox& box : range.boxes) {
    runs.push_back({box, first});
    first += box.numel();
  }
  return runs;
}

}  // namespace ddp
