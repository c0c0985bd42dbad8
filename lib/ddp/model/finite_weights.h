#pragma once
// Whether weights hold only finite values: a diverged run's checkpoint is no place to resume from
// or to export.

#include <torch/types.h>

#include <vector>

namespace ddp {

/// True when every defined tensor holds only finite values. One read of a value from the device for
/// all of them together, not one a tensor.
bool all_finite(const std::vector<torch::Tensor>& tensors);

}  // namespace ddp
