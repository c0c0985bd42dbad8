#include "ddp/parallel/optimizer_shards.h"

#include <algorithm>
#include <sstream>
#include <type_traits>

#include "ddp/comm/collectives.h"
#include "ddp/common/error.h"
#include "ddp/parallel/optimizer_state.h"

namespace ddp {

// Note [Optimizer shards]
// ZeRO stage 1. Every rank of the data-shard group holds the whole model and, after the gradient
// all-reduce, the whole averaged gradient, exactly as without sharding; the optimizer's state (two
// moments per parameter for Adam: 8 of the 16 bytes per float32 parameter) is what is split. Each
// parameter tensor has one owner, chosen by size, largest first, to the least-loaded rank (ties to
// the lowest), so every rank computes the same owners. The owner alone steps it; clipping has
// already scaled the whole gradient by the global norm on every rank, and the optimizers' updates
// are element-wise, so the owner's update is bit for bit the replicated run's. The owners then
// broadcast their parameters, coalesced, one broadcast per owner. Checkpoints stay whole files:
// the writer gathers every owner's state into an optimizer over all parameters (gather_state), and
// a resume loads such a file, replicated or sharded, and keeps its own part (keep_owned_state);
// so a run resumes with sharding switched on or off. A weight tied across pipeline stages is owned
// by rank 0 of each stage's group, so that the ranks that step it pair up across the stages.

OptimizerShards::OptimizerShards(std::vector<torch::Tensor> parameters, const Communicator& group,
                                 const std::vector<std::size_t>& on_first)
    : parameters_(std::move(parameters)), owners_(parameters_.size(), 0), group_(group) {
  std::vector<std::size_t> order;
  std::vector<int64_t> load(static_cast<std::size_t>(group_.world_size), 0);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (std::find(on_first.begin(), on_first.end(), i) == on_first.end())
      order.push_back(i);
    else
      load[0] += parameters_[i].numel();  // owners_[i] is 0 already
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return parameters_[a].numel() > parameters_[b].numel(); });
  for (std::size_t i : order) {
    int owner = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owners_[i] = owner;
    load[static_cast<std::size_t>(owner)] += parameters_[i].numel();
  }
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (owners_[i] == group_.rank) owned_.push_back(parameters_[i]);
}

std::vector<OwnedRange> OptimizerShards::owned_ranges() const {
  std::vector<OwnedRange> ranges;
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (owners_[i] == group_.rank) ranges.push_back({i, 0, parameters_[i].detach(), parameters_[i]});
  return ranges;
}

void OptimizerShards::share_updated_parameters() const {
  torch::NoGradGuard no_grad;
  for (int owner = 0; owner < group_.world_size; ++owner) {
    std::vector<torch::Tensor> from_owner;
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      if (owners_[i] == owner) from_owner.push_back(parameters_[i]);
    if (!from_owner.empty()) broadcast_coalesced(group_, from_owner, owner);
  }
}

void OptimizerShards::gather_state(const torch::optim::Optimizer& sharded, torch::optim::Optimizer& whole) const {
  for (int owner = 0; owner < group_.world_size; ++owner) {
    std::vector<std::size_t> ids;
    std::vector<StateTensors> states;
    std::vector<torch::Tensor> flat;
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      if (owners_[i] != owner) continue;
      ids.push_back(i);
      // The owner sends its state; the others make room of the same shapes to receive it.
      states.push_back(owner == group_.rank ? read_state(sharded, parameters_[i]) : read_state(whole, parameters_[i]));
      flat.push_back(states.back().step);
      for (auto& slot : states.back().slots) flat.push_back(slot);
    }
    if (flat.empty()) continue;
    broadcast_coalesced(group_, flat, owner);
    for (std::size_t k = 0; k < ids.size(); ++k) write_state(whole, parameters_[ids[k]], states[k]);
  }
}

void OptimizerShards::keep_owned_state(const torch::optim::Optimizer& whole, torch::optim::Optimizer& sharded) const {
  for (const auto& p : owned_) write_state(sharded, p, read_state(whole, p));
}

}  // namespace ddp
