#pragma once
// The optimizer named by `optim.name`, with the learning rate scaled for the world size.

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "ddp/optim/optim_config.h"

namespace ddp {

/// optim.lr after optim.lr_scaling: unchanged, × world_size (linear) or × sqrt(world_size).
double scaled_lr(const OptimConfig& config, int world_size);

/// sgd (momentum, nesterov), adam or adamw over `parameters`, at learning rate `lr`. `dims`, when
/// given, is each parameter's dimension count for optim.decay_params (a sharded run's parameters
/// are 1-D pieces of the model's tensors; by default each tensor's own).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& parameters,
                                                        const OptimConfig& config, double lr,
                                                        const std::vector<int64_t>& dims = {});

/// Sets every parameter group's learning rate.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace ddp
