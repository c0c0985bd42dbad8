#pragma once
// ZeRO stage 1 (`dist.shard: optimizer`): the ranks of a data-shard group split the optimizer's
// state. Gradients are averaged over every replica as without sharding; each rank then steps only
// the parameters it owns, keeping their optimizer state alone, and sends them, updated, to the
// others. See Note [Optimizer shards] in optimizer_shards.cpp.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "ddp/comm/process_group.h"
#include "ddp/parallel/owned_range.h"
#include "ddp/parallel/optimizer_state.h"

namespace ddp {

/// Which rank of the group steps which parameter, and the exchanges that follow from it.
class OptimizerShards {
 public:
  /// Owners for `parameters` (each tensor once, the same list on every rank of `group`), balanced
  /// by size; `on_first` (indices into it) go to the group's rank 0 whatever their size. `group`
  /// must outlive this.
  OptimizerShards(std::vector<torch::Tensor> parameters, const Communicator& group,
                  const std::vector<std::size_t>& on_first = {});

  /// The parameters this rank steps: its optimizer's.
  const std::vector<torch::Tensor>& owned() const { return owned_; }
  /// The owner (a rank of the group) of each parameter, in the constructor's order.
  const std::vector<int>& owners() const { return owners_; }

  /// The parameters this rank steps, each whole: sharded checkpoints.
  std::vector<OwnedRange> owned_ranges() const;

  /// After this rank's optimizer stepped its own: every parameter, updated, from its owner to every
  /// rank of the group. Every rank of the group calls it.
  void share_updated_parameters() const;

 private:
  std::vector<torch::Tensor> parameters_, owned_;
  std::vector<int> owners_;
  const Communicator& group_;
};

}  // namespace ddp
