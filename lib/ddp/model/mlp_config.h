#pragma once
// The mlp family's model.* keys (mlp.cpp declares them and builds the model).

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

class ConfigSchema;

/// A multi-layer perceptron on flattened images, as model.* shapes it (its outputs: model.num_classes).
struct MlpConfig {
  std::vector<int64_t> hidden = {256, 128};  ///< hidden layer widths, input side first
};

/// Declares the mlp keys, bound to `config`; their rules apply when `model_name` (model.name's
/// value, read when the rules run) is mlp.
void declare_config(ConfigSchema& schema, MlpConfig& config, const std::string& model_name);

}  // namespace ddp
