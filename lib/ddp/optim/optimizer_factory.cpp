#include "ddp/optim/optimizer_factory.h"

#include <cmath>

#include "ddp/common/error.h"
#include "ddp/optim/foreach_adamw.h"

namespace ddp {

double scaled_lr(const OptimConfig& config, int world_size) {
  if (config.lr_scaling == "linear") return config.lr * world_size;
  if (config.lr_scaling == "sqrt") return config.lr * std::sqrt(static_cast<double>(world_size));
  return config.lr;
}

namespace {

// optim.decay_params: matrices puts parameters of fewer than two dimensions (biases, LayerNorm
// gains) in a group of their own without weight decay, after the decayed group, as nanoGPT's
// configure_optimizers does; all keeps one group.
template <typename Options>
std::vector<torch::optim::OptimizerParamGroup> groups(const std::vector<torch::Tensor>& parameters,
                                                      const OptimConfig& config, const Options& defaults,
                                                      const std::vector<int64_t>& dims) {
  if (config.decay_params == "all") return {torch::optim::OptimizerParamGroup(parameters)};
  std::vector<torch::Tensor> decayed, plain;
  for (std::size_t i = 0; i < parameters.size(); ++i)
    ((dims.empty() ? parameters[i].dim() : dims[i]) >= 2 ? decayed : plain).push_back(parameters[i]);
  std::vector<torch::optim::OptimizerParamGroup> out;
  if (!decayed.empty()) out.emplace_back(decayed, std::make_unique<Options>(defaults));
  if (!plain.empty()) {
    auto options = std::make_unique<Options>(defaults);
    options->weight_decay(0);
    out.emplace_back(plain, std::move(options));
  }
  return out;
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& parameters,
                                                        const OptimConfig& config, double lr,
                                                        const std::vector<int64_t>& dims) {
  TORCH_CHECK(dims.empty() || dims.size() == parameters.size(), "make_optimizer: one dimension count per parameter");
  if (config.name == "sgd") {
    torch::optim::SGDOptions options(lr);
    options.momentum(config.momentum).nesterov(config.nesterov).weight_decay(config.weight_decay);
    return std::make_unique<torch::optim::SGD>(groups(parameters, config, options, dims), options);
  }
  if (config.name == "adam") {
    torch::optim::AdamOptions options(lr);
    options.betas({config.beta1, config.beta2}).eps(config.eps).weight_decay(config.weight_decay);
    return std::make_unique<torch::optim::Adam>(groups(parameters, config, options, dims), options);
  }
  if (config.name == "adamw") {
    torch::optim::AdamWOptions options(lr);
    options.betas({config.beta1, config.beta2}).eps(config.eps).weight_decay(config.weight_decay);
    return std::make_unique<ForeachAdamW>(groups(parameters, config, options, dims), options);
  }
  throw ConfigError("optim.name: must be one of sgd, adam, adamw, got \"" + config.name + "\"");
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace ddp
