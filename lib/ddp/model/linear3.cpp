// The SimpleModel of PyTorch's DDP tutorials: three Linear layers (fc1, fc2, fc3), ReLU between.
// Names match scripts/ddp_models.py's Linear3.

#include <torch/nn.h>

#include "ddp/model/model_registry.h"

namespace ddp {
namespace {

class Linear3 : public Model {
 public:
  explicit Linear3(const ModelConfig& config) {
    fc1_ = register_module("fc1", torch::nn::Linear(kInputSize, 10));
    fc2_ = register_module("fc2", torch::nn::Linear(10, 10));
    fc3_ = register_module("fc3", torch::nn::Linear(10, config.num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(fc1_->forward(x.reshape({-1, kInputSize})));
    x = torch::relu(fc2_->forward(x));
    return fc3_->forward(x);
  }

 private:
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Linear fc2_{nullptr};
  torch::nn::Linear fc3_{nullptr};
};

}  // namespace

/// Registers "linear3"; called from model_registry.cpp (Note [Registries]).
void register_linear3(ModelFactories& factories) {
  factories.add("linear3", [](const ModelConfig& config, const ModelContext&) {
    check_num_classes(config);
    return std::make_shared<Linear3>(config);
  });
}

}  // namespace ddp
