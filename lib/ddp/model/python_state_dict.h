#pragma once
// Model weights in the file format Python reads: `model.load_state_dict(torch.load(path))` works on
// the result, so a model trained here can be evaluated or fine-tuned with plain PyTorch.

#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/model/state_dict_file.h"

namespace ddp {

/// Parameters and buffers under their dotted names, in the order Python's `module.state_dict()` has.
std::vector<std::pair<std::string, torch::Tensor>> python_state_dict(const torch::nn::Module& module);

/// Writes python_state_dict(model) as a torch.save-compatible dict; atomic; FileError naming `path`.
void save_python_state_dict(const torch::nn::Module& model, const std::string& path);

/// A trained model's weights in `output_dir`, in both formats Python reads, under the same names:
/// model.pt (torch.load) and model.safetensors (safetensors.torch.load_file). Atomic each; FileError
/// or IoError naming the file.
void save_model_weights(const torch::nn::Module& model, const std::string& output_dir);

/// Keys a file may have or lack without being refused (e.g. a buffer one form of a model keeps).
using OptionalKey = std::function<bool(const std::string& name)>;

/// Loads a file save_python_state_dict (or Python's `torch.save(model.state_dict(), path)`) wrote into `model`;
/// FileError listing every missing, unexpected or wrongly shaped key, leaving the model unchanged.
/// A key `optional` accepts may be missing (the model keeps its own) or unexpected (ignored).
void load_python_state_dict(torch::nn::Module& model, const std::string& path, const OptionalKey& optional = {});

/// The same for the entries of `path` (converted, say, from another layout), which messages name.
/// In a deferred build (Note [Deferred initialisation]) a parameter's values are read from the file
/// only when a pass gives it them; the rest are read now.
void load_state_dict_entries(torch::nn::Module& model, const StoredTensors& entries, const std::string& path,
                             const OptionalKey& optional = {});

}  // namespace ddp
