#include "ddp/optim/optimizer_factory.h"

#include <cmath>

#include "ddp/common/error.h"

namespace ddp {

double scaled_lr(const OptimConfig& config, int world_size) {
  if (config.lr_scaling == "linear") return config.lr * world_size;
  if (config.lr_scaling == "sqrt") return config.lr * std::sqrt(static_cast<double>(world_size));
  return config.lr;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& parameters,
                                                        const OptimConfig& config, double lr) {
  if (config.name == "sgd") {
    torch::optim::SGDOptions options(lr);
    options.momentum(config.momentum).nesterov(config.nesterov).weight_decay(config.weight_decay);
    return std::make_unique<torch::optim::SGD>(parameters, options);
  }
  if (config.name == "adam") {
    torch::optim::AdamOptions options(lr);
    options.betas({config.beta1, config.beta2}).eps(config.eps).weight_decay(config.weight_decay);
    return std::make_unique<torch::optim::Adam>(parameters, options);
  }
  if (config.name == "adamw") {
    torch::optim::AdamWOptions options(lr);
    options.betas({config.beta1, config.beta2}).eps(config.eps).weight_decay(config.weight_decay);
    return std::make_unique<torch::optim::AdamW>(parameters, options);
  }
  throw ConfigError("optim.name: must be one of sgd, adam, adamw, got \"" + config.name + "\"");
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace ddp
