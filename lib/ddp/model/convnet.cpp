// The ConvNet of PyTorch's DDP tutorials. Parameter names match scripts/ddp_models.py's ConvNet:
// layer{1,2}.{0: Conv2d, 1: BatchNorm2d if batchnorm, ...}, fc.

// Note [ConvNet speed]
// Two changes make the same network faster than the tutorial's code, with the same parameters:
// - Channels-last (NHWC) activations and conv weights (model.channels_last): LibTorch's CPU
//   convolution (oneDNN), batch norm and max-pooling kernels are vectorised over channels in that
//   format; the NCHW max-pooling alone takes a sixth of a step. Sums are reordered, so results
//   differ from NCHW in the last bits.
// - ReLU after max-pooling instead of before: max(relu(a), relu(b)) == relu(max(a, b)) exactly,
//   in forward and in the gradient (both are zero unless the window's maximum is positive, and
//   then both pass it to the same element), and ReLU then touches a quarter of the values.
//   Neither layer has parameters, so state_dict keys stay those of the Python module.

#include <torch/nn.h>

#include "ddp/config/config_schema.h"
#include "ddp/model/deferred_init.h"
#include "ddp/model/drawn_layers.h"
#include "ddp/model/model_registry.h"
#include "ddp/model/sync_batchnorm.h"

namespace ddp {
namespace {

class ConvNet : public Model {
 public:
  ConvNet(const ModelConfig& config, const ModelContext& context) : channels_last_(config.convnet.channels_last) {
    layer1_ = register_module("layer1", block(kInputChannels, 16, config.convnet, context));
    layer2_ = register_module("layer2", block(16, 32, config.convnet, context));
    // Two 2x2 poolings quarter each side.
    fc_ = register_module("fc", drawn_linear((kInputHeight / 4) * (kInputWidth / 4) * 32, config.num_classes));
    if (channels_last_)
      for (auto& p : parameters())
        if (p.dim() == 4) set_memory_format(p, torch::MemoryFormat::ChannelsLast);
  }

  // The two conv blocks and the classifier.
  std::vector<ModelBlock> declare_blocks() override {
    bool channels_last = channels_last_;
    return {{"layer1", layer1_->parameters(), layer1_->buffers(),
             [layer = layer1_.ptr(), channels_last](torch::Tensor x) {
               if (channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
               return layer->forward(x);
             }},
            {"layer2", layer2_->parameters(), layer2_->buffers(), [layer = layer2_.ptr()](torch::Tensor x) { return layer->forward(x); }},
            // reshape flattens in logical (C, H, W) order whatever the memory format, as fc expects.
            {"fc", fc_->parameters(), {}, [fc = fc_.ptr()](torch::Tensor x) { return fc->forward(x.reshape({x.size(0), -1})); }}};
  }

 private:
  // Parameters sit at the indices of the Python block() (conv 0, batch norm 1); optional layers are
  // left out, so indices shift as they do there.
  static torch::nn::Sequential block(int64_t in_channels, int64_t out_channels, const ConvNetConfig& config,
                                     const ModelContext& context) {
    torch::nn::Sequential layers;
    layers->push_back(drawn_conv2d(torch::nn::Conv2dOptions(in_channels, out_channels, 5).stride(1).padding(2)));
    if (config.batchnorm && config.sync_batchnorm && context.cross_rank_sum)
      layers->push_back(SyncBatchNorm2d(out_channels, context.cross_rank_sum));
    else if (config.batchnorm)
      layers->push_back(torch::nn::BatchNorm2d(out_channels));
    layers->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2).stride(2)));
    if (config.relu) layers->push_back(torch::nn::ReLU());  // after pooling: Note [ConvNet speed]
    return layers;
  }

  bool channels_last_;
  torch::nn::Sequential layer1_{nullptr};
  torch::nn::Sequential layer2_{nullptr};
  torch::nn::Linear fc_{nullptr};
};

}  // namespace

void declare_config(ConfigSchema& schema, ConvNetConfig& config) {
  schema.add("model.batchnorm", &config.batchnorm, "convnet: BatchNorm2d after each conv");
  schema.add("model.sync_batchnorm", &config.sync_batchnorm,
             "convnet: BatchNorm statistics over the global batch of all ranks, as torch.nn.SyncBatchNorm; "
             "world N with batch b then trains as world 1 with batch N·b");
  schema.add("model.relu", &config.relu, "convnet: ReLU after each max-pooling (the same as before it)");
  schema.add("model.channels_last", &config.channels_last,
             "convnet: channels-last (NHWC) memory format for 4-D weights and inputs, whose CPU kernels are "
             "faster; same model and weights, results equal up to float rounding");
}

/// Registers "convnet"; called from model_registry.cpp (Note [Registries]).
void register_convnet(ModelFactories& factories) {
  factories.add("convnet", [](const ModelConfig& config, const ModelContext& context) {
    check_num_classes(config);
    return std::make_shared<ConvNet>(config, context);
  });
}

}  // namespace ddp
