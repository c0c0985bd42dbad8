#pragma once
// Dropout as torch.nn.functional.dropout computes it (zero each element with probability p, scale
// the rest by 1 / (1 - p)), with a one-byte mask drawn from a counter-based generator: see
// Note [Byte-mask dropout].

#include <torch/types.h>

namespace ddp {

/// `x` with dropout `p` applied when `training`; differentiable. Draws one number from the global
/// CPU generator per call, so a checkpoint's generator state resumes the same masks.
torch::Tensor byte_mask_dropout(const torch::Tensor& x, double p, bool training);

/// byte_mask_dropout(relu(x), p, training), one mask for both: backward keeps a byte per element
/// instead of ReLU's output as well. The same values, gradients and generator draws.
torch::Tensor relu_dropout(const torch::Tensor& x, double p, bool training);

}  // namespace ddp
