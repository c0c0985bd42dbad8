#pragma once
// A run of one parameter's elements whose value and optimizer state this rank keeps: the unit a
// sharded checkpoint saves and restores (checkpoint_format.h), whatever the layout.

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>

namespace ddp {

struct OwnedRange {
  std::size_t parameter = 0;  ///< index in the plan's parameters (prepare_model's list)
  int64_t begin = 0;          ///< its first element in the parameter's logical (row-major) order
  /// Its elements, in this rank's copy, which restoring writes through: a 1-D piece of a flat shard,
  /// or a whole parameter (any memory layout; its elements in logical order).
  torch::Tensor value;
  torch::Tensor stepped;      ///< the tensor the optimizer steps for them, whose state is theirs
};

}  // namespace ddp
