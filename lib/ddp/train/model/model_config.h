#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

class ConfigSchema;

/// `model:` which network, by registry name, and its parameters.
struct ModelConfig {
  std::string name = "convnet";  ///< convnet | linear3 | mlp
  int64_t num_classes = 10;
  bool batchnorm = true;  ///< convnet: BatchNorm2d after each conv
  bool relu = true;       ///< convnet: ReLU after each conv
  bool channels_last = true;  ///< convnet: NHWC activations and conv weights (faster CPU kernels)
  std::vector<int64_t> hidden = {256, 128};  ///< mlp: hidden layer widths
};

/// Declares the `ModelConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, ModelConfig& config);

/// Every registered model name, sorted (defined by the registry, so the config's choices follow it).
std::vector<std::string> model_names();

}  // namespace ddp
