#pragma once
// The torchscript family's model.* keys (scripted_model.cpp declares them and loads the module).

#include <string>

namespace ddp {

class ConfigSchema;

/// A TorchScript module, torch.jit.script(model).save(path) in Python, trained as a built-in model.
struct TorchScriptConfig {
  std::string path;           ///< the module file
  bool jit_optimize = false;  ///< TorchScript's profiling executor optimises the graph
  bool channels_last = true;  ///< NHWC activations and 4-D weights, unless its code calls .view
  bool sync_batchnorm = false;  ///< read only to refuse it: a module's BatchNorms keep per-process statistics
};

/// Declares the torchscript keys, bound to `config`; their rules apply when `model_name`
/// (model.name's value, read when the rules run) is torchscript.
void declare_config(ConfigSchema& schema, TorchScriptConfig& config, const std::string& model_name);

}  // namespace ddp
