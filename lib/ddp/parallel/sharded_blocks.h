#pragma once
// dist.shard parameters on a model's blocks (Note [Blocks]): which parameters form each shard unit,
// and the runner that gathers a unit's parameters before its block runs (Note [Unit hooks]).

#include <torch/types.h>

#include <vector>

#include "ddp/model/model_block.h"

namespace ddp {

class ShardedDataParallel;

/// The units of `blocks` and the runner that runs them inside the engine's gathers.
class ShardedBlocks final : public BlockRunner {
 public:
  /// Each block's parameters form a unit, but for those in `root` or in more than one block (a tied
  /// weight), which stay with the root; a block left with none is no unit.
  ShardedBlocks(const std::vector<ModelBlock>& blocks, const std::vector<torch::Tensor>& root);

  /// The units' parameters, in block order: what ShardedDataParallel lays out after the root.
  const std::vector<std::vector<torch::Tensor>>& units() const { return units_; }

  /// From now on run() calls `engine`'s hooks, which must outlive this.
  void attach(ShardedDataParallel& engine) { engine_ = &engine; }

  /// The blocks (those given to the constructor) on `x`: the root's parameters first, then each
  /// unit's around its block.
  torch::Tensor run(const std::vector<ModelBlock>& blocks, torch::Tensor x) override;

 private:
  std::vector<std::vector<torch::Tensor>> units_;
  std::vector<int> unit_of_block_;  // -1: no unit
  ShardedDataParallel* engine_ = nullptr;
};

}  // namespace ddp
