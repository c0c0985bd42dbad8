#pragma once
// The convnet family's model.* keys (convnet.cpp declares them and builds the model).

namespace ddp {

class ConfigSchema;

/// The ConvNet of PyTorch's DDP tutorials, as model.* shapes it (its outputs: model.num_classes).
struct ConvNetConfig {
  bool batchnorm = true;        ///< BatchNorm2d after each conv
  bool sync_batchnorm = false;  ///< batch statistics over all ranks (SyncBatchNorm)
  bool relu = true;             ///< ReLU after each max-pooling
  bool channels_last = true;    ///< NHWC activations and 4-D weights (faster CPU kernels)
};

/// Declares the convnet keys, bound to `config`.
void declare_config(ConfigSchema& schema, ConvNetConfig& config);

}  // namespace ddp
