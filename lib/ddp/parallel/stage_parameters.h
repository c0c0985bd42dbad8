#pragma once
// Pipeline stages: which of the model's parameters this rank's stage holds, and what follows from
// holding only those (Note [Stage parameters] in stage_parameters.cpp).

#include <torch/torch.h>

#include <map>
#include <vector>

#include "ddp/comm/process_group.h"
#include "ddp/parallel/device_mesh.h"

namespace ddp {

/// This rank's stage's share of the parameters.
class StageParameters {
 public:
  /// `parameters`: the plan's list, the same on every rank; `used[s]`: those stage s's layers use,
  /// `buffers[s]` those they keep. Frees the other parameters here. `pipeline`: this rank's group along the pipeline (its rank is the
  /// stage), which must outlive this. Every rank of `world` calls it: the groups of the stages
  /// sharing a tied weight are made here.
  StageParameters(const std::vector<torch::Tensor>& parameters, const std::vector<std::vector<torch::Tensor>>& used,
                  const std::vector<std::vector<torch::Tensor>>& buffers, const Communicator& world,
                  const DeviceMesh& mesh, const Communicator& pipeline);

  /// This stage's parameters, in the plan's order: what it trains.
  const std::vector<torch::Tensor>& mine() const { return mine_; }
  /// Each of mine()'s index in the plan's list.
  const std::vector<std::size_t>& mine_indices() const { return mine_indices_; }
  /// Those of mine() (indices into it) that another stage holds too: tied weights.
  std::vector<std::size_t> tied() const;
  /// ConfigError unless this stage's tied weights are shared with one set of stages: sharding lays
  /// them out together, so that each shard pairs with the same shard at the other stages.
  void check_one_tied_set() const;
  /// Whether sums over the pipeline count this stage's copy of parameter `index` (of the plan's
  /// list): its own, a tied one only in the first stage that uses it. That copy is the one saved.
  bool counts(std::size_t index) const { return placed_[index].owner == pipeline_.rank; }
  /// The group of this rank and its peers at the other stages that hold parameter `index` too (a
  /// tied weight; group rank 0 is its first stage); null: this stage alone holds it.
  const Communicator* copies(std::size_t index) const;
  /// Bytes of this stage's parameters.
  int64_t bytes() const;
  /// Every parameter's whole shape, in the plan's order.
  std::vector<std::vector<int64_t>> shapes() const;

  /// Every buffer on every rank of the pipeline as the stage that keeps it has it: what rank 0
  /// writes in checkpoints and model.pt.
  void share_buffers() const;
  /// Every parameter whole on every rank of the pipeline, from the stage that holds it, until
  /// release(); the buffers too.
  void materialize() const;
  void release() const;

 private:
  struct Placed {
    torch::Tensor tensor;
    std::vector<int64_t> shape;
    int owner = 0;            // the first stage that uses it
    std::vector<int> stages;  // every stage that uses it, ascending
    bool mine = false;
  };
  std::vector<Placed> placed_;
  std::vector<torch::Tensor> mine_;
  std::vector<std::size_t> mine_indices_;
  std::vector<std::vector<torch::Tensor>> buffers_;  // by the stage that keeps them
  const Communicator& pipeline_;
  std::map<std::vector<int>, Communicator> tied_groups_;  // stages → the group of this rank's pipeline at them
};

}  // namespace ddp
