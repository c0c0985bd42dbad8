#pragma once
// Whether a tensor plan computes what the whole module did (Note [Probing a tensor plan]).

#include <torch/types.h>

#include "ddp/task/task.h"

namespace ddp {

class TensorShards;

/// The whole module's output for the first training sample, taken before the tensor pass splits it;
/// after the pass, check() runs the split module on the same sample and refuses a plan whose output
/// differs. Only a module whose weights are all here before the split can be probed (a TorchScript
/// module's are; a deferred build's come from the pass itself).
class TensorPlanProbe {
 public:
  explicit TensorPlanProbe(Task& task);

  /// The relative difference of the split module's output (this rank's slice of the vocabulary where
  /// `shards` splits the logits) from the whole one's; ConfigError naming dist.tensor_plan, the
  /// difference and the likely cause where it is more than rounding.
  double check(const TensorShards& shards) const;

 private:
  torch::Tensor output() const;  // eval mode, no gradient, the generator's state kept

  Task& task_;
  torch::Tensor input_;
  torch::Tensor whole_;
};

}  // namespace ddp
