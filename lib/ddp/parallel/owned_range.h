#pragma once
// A run of one parameter's elements whose value and optimizer state this rank keeps: the unit a
// sharded checkpoint saves and restores (sharded_checkpoint.h), whatever the layout.

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>

namespace ddp {

struct OwnedRange {
  std::size_t parameter = 0;  ///< index in the plan's parameters (prepare_model's list)
  int64_t begin = 0;          ///< its first element in the flattened parameter
  torch::Tensor value;        ///< its elements: a 1-D view of this rank's copy, written through on restore
  torch::Tensor stepped;      ///< the tensor the optimizer steps for them, whose state is theirs
};

}  // namespace ddp
