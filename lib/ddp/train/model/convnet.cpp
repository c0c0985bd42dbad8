// The ConvNet of PyTorch's DDP tutorials. Parameter names match scripts/ddp_models.py's ConvNet:
// layer{1,2}.{0: Conv2d, 1: BatchNorm2d if batchnorm, ...}, fc.

#include <torch/nn.h>

#include "ddp/train/model/model_registry.h"

namespace ddp {
namespace {

class ConvNet : public Model {
 public:
  explicit ConvNet(const ModelConfig& config) {
    layer1_ = register_module("layer1", block(kInputChannels, 16, config));
    layer2_ = register_module("layer2", block(16, 32, config));
    // Two 2x2 poolings quarter each side.
    fc_ = register_module("fc", torch::nn::Linear((kInputHeight / 4) * (kInputWidth / 4) * 32,
                                                  config.num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    return fc_->forward(layer2_->forward(layer1_->forward(x)).reshape({x.size(0), -1}));
  }

 private:
  // Only optional layers are left out, so later indices shift exactly as in the Python block().
  static torch::nn::Sequential block(int64_t in_channels, int64_t out_channels, const ModelConfig& config) {
    torch::nn::Sequential layers;
    layers->push_back(
        torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, out_channels, 5).stride(1).padding(2)));
    if (config.batchnorm) layers->push_back(torch::nn::BatchNorm2d(out_channels));
    if (config.relu) layers->push_back(torch::nn::ReLU());
    layers->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2).stride(2)));
    return layers;
  }

  torch::nn::Sequential layer1_{nullptr};
  torch::nn::Sequential layer2_{nullptr};
  torch::nn::Linear fc_{nullptr};
};

}  // namespace

/// Registers "convnet"; called from model_registry.cpp (Note [Model registration]).
void register_convnet(ModelFactories& factories) {
  factories.emplace("convnet", [](const ModelConfig& config) { return std::make_shared<ConvNet>(config); });
}

}  // namespace ddp
