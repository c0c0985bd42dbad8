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
// broadcast their parameters, coalesced, one broadcast per owner. A checkpoint holds each owner's
// parameters whole (owned_ranges), so a run resumes with sharding switched on or off. A weight tied
// across pipeline stages is owned by rank 0 of each stage's group, so that the ranks that step it
// pair up across the stages.

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
    if (owners_[i] == group_.rank) ranges.push_back({i, 0, parameters_[i].detach(), parameters_[i], {}});
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

}  // namespace ddp
