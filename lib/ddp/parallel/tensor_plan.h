#pragma once
// Which layers a tensor-parallel pass splits, and how (Note [Tensor parallelism]): a model family's
// built-in plan, or the user's dist.tensor_plan.

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/model/model_config.h"
#include "ddp/parallel/mesh_config.h"

namespace ddp {

/// One entry of a tensor plan: how the submodules at a path are split.
struct TensorPlanEntry {
  std::string path;     ///< a submodule's path; `*` stands for one component (a block's index)
  std::string style;    ///< colwise (output features) | rowwise (input features; an Embedding's vocabulary) | replicate
  bool output = false;  ///< colwise: its output is the model's (the logits), which the loss takes by vocabulary slice
};

/// The built-in plan of `model.name` (Megatron's, as torchtitan applies it) for a tensor group of
/// `tensor` ranks. ConfigError naming the key where the family has none, or where a head count or
/// width does not divide by it.
std::vector<TensorPlanEntry> builtin_tensor_plan(const ModelConfig& model, int64_t tensor);

/// dist.tensor_plan, "PATH=STYLE, PATH=STYLE, ...": its entries, `lm_head=colwise` the output (Hugging
/// Face's name for the head: its logits stay split, for the loss-parallel cross-entropy); ConfigError
/// naming the key and the entry that is not PATH=STYLE with a known style (and the nearest style).
std::vector<TensorPlanEntry> parse_tensor_plan(const std::string& text);

/// The plan a run splits its model by: dist.tensor_plan where given, else the family's own.
std::vector<TensorPlanEntry> tensor_plan(const ModelConfig& model, const MeshConfig& mesh);

}  // namespace ddp
