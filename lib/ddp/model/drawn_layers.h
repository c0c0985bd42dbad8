#pragma once
// Layers as LibTorch draws them, which a deferred build defers (Note [Deferred initialisation]).

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>

namespace ddp {

/// torch::nn::Linear(in, out). In a deferred build LibTorch's draws are rewound and made again
/// through init_parameter, as LinearImpl::reset_parameters makes them: the values, and where the
/// generator ends, are a whole build's, and one layer at a time holds storage.
torch::nn::Linear drawn_linear(int64_t in, int64_t out);

/// torch::nn::Conv2d(options), deferred alike (ConvNdImpl::reset_parameters draws as Linear's).
torch::nn::Conv2d drawn_conv2d(const torch::nn::Conv2dOptions& options);

}  // namespace ddp
