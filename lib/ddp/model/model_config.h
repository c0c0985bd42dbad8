#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

class ConfigSchema;

/// The fewest outputs a classifier may have (the config's bound and the registry's check).
inline constexpr int64_t kMinClasses = 2;

/// `model:` which network, by registry name, and its parameters.
struct ModelConfig {
  std::string name = "convnet";  ///< a registered model (convnet | gpt | linear3 | mlp | torchscript), or graphsage
  std::string path;       ///< torchscript: the module file torch.jit.script(model).save() wrote
  std::string init_from;  ///< any model: start from these weights (a state_dict file such as model.pt)
  bool jit_optimize = false;  ///< torchscript: TorchScript's profiling executor optimises the graph
  int64_t num_classes = 10;
  bool batchnorm = true;  ///< convnet: BatchNorm2d after each conv
  bool sync_batchnorm = false;  ///< convnet: batch statistics over all ranks (SyncBatchNorm)
  bool relu = true;       ///< convnet: ReLU after each max-pooling
  bool channels_last = true;  ///< convnet, torchscript: NHWC activations and 4-D weights (faster CPU kernels)
  std::vector<int64_t> hidden = {256, 128};  ///< mlp, graphsage: hidden layer widths
  std::string aggregation = "mean";  ///< graphsage: mean | max | sum of the neighbours' features
  bool normalize = false;            ///< graphsage: L2-normalise each layer's output
  double dropout = 0;                ///< graphsage: between layers; gpt: nanoGPT's dropouts
  int64_t n_layer = 12;      ///< gpt: transformer blocks
  int64_t n_head = 12;       ///< gpt: attention heads per block (n_embd divisible by it)
  int64_t n_embd = 768;      ///< gpt: width
  int64_t block_size = 1024; ///< gpt, causal_lm: tokens of context (a sample is block_size + 1 tokens)
  int64_t vocab_size = 50304;  ///< gpt: token ids 0..vocab_size-1 (256 for byte-level text)
  bool bias = true;          ///< gpt: biases in the Linears and LayerNorms
};

/// Declares the `ModelConfig` keys, bound to `config`, with their defaults, docs and ranges.
/// model.name takes the registry's models and `task_models`, those a task builds itself (the trainer
/// passes the task registry's: graphsage), which this area cannot see.
void declare_config(ConfigSchema& schema, ModelConfig& config, const std::vector<std::string>& task_models = {});

/// Every registered model name, sorted (defined by the registry, so the config's choices follow it).
std::vector<std::string> model_names();

}  // namespace ddp
