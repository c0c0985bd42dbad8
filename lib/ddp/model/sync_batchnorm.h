#pragma once
// BatchNorm whose batch statistics cover every rank's batch, as torch.nn.SyncBatchNorm's do: with
// it, N ranks with batch b train exactly as one process with batch N·b.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "ddp/model/model_registry.h"

namespace ddp {

/// BatchNorm2d over [N, C, H, W] whose training-mode mean and variance are those of the global batch.
/// Its parameters and buffers are BatchNorm2d's, under the same names, so state_dicts are interchangeable.
/// In eval mode it is plain BatchNorm2d (the running statistics are the same on every rank).
class SyncBatchNorm2dImpl : public torch::nn::Module {
 public:
  /// `sum` adds a tensor up over the ranks; every rank must call forward and backward in the same order.
  SyncBatchNorm2dImpl(int64_t channels, CrossRankSum sum, double eps = 1e-5, double momentum = 0.1);

  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  CrossRankSum sum_;
  double eps_;
  double momentum_;
};
TORCH_MODULE(SyncBatchNorm2d);

}  // namespace ddp
