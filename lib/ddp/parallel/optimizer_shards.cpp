#include "ddp/parallel/optimizer_shards.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <type_traits>

#include "ddp/comm/collectives.h"
#include "ddp/common/error.h"

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
// so a run resumes with sharding switched on or off.

namespace {

// The optimizer keeps its state by the parameter's TensorImpl: as its address in text on LibTorch
// 1.x, as the pointer itself on 2.x.
template <typename Map>
typename Map::key_type state_key(const Map&, const torch::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;
    out << p.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// A parameter's state as tensors: its moments or momentum, and its step count (-1: no state yet,
// e.g. a parameter that has had no gradient). Shapes are the parameter's, state or not, so every
// rank knows what a broadcast carries.
struct StateTensors {
  torch::Tensor step;                // int64 [1]
  std::vector<torch::Tensor> slots;  // exp_avg, exp_avg_sq (adam, adamw); momentum_buffer (sgd)
};

int slots_of(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return 1;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer) || dynamic_cast<const torch::optim::AdamW*>(&optimizer))
    return 2;
  throw UserError("dist.shard: optimizer shards sgd, adam and adamw only");
}

// `p`'s state tensors in `optimizer`, not copies (undefined where a slot was never made), and its
// step count in `step` (0 for sgd); empty when it has no state.
std::vector<torch::Tensor> state_of(const torch::optim::Optimizer& optimizer, const torch::Tensor& p, int64_t& step) {
  auto found = optimizer.state().find(state_key(optimizer.state(), p));
  if (found == optimizer.state().end()) return {};
  const torch::optim::OptimizerParamState* state = found->second.get();
  if (auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
    step = adamw->step();
    return {adamw->exp_avg(), adamw->exp_avg_sq()};
  }
  if (auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state)) {
    step = adam->step();
    return {adam->exp_avg(), adam->exp_avg_sq()};
  }
  if (auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
    step = 0;
    return {sgd->momentum_buffer()};
  }
  return {};
}

StateTensors read_state(const torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  StateTensors out;
  int64_t step = -1;
  std::vector<torch::Tensor> slots = state_of(optimizer, p, step);
  out.step = torch::full({1}, slots.empty() ? -1 : step, torch::dtype(torch::kLong).device(p.device()));
  slots.resize(static_cast<std::size_t>(slots_of(optimizer)));
  for (const auto& slot : slots) out.slots.push_back(slot.defined() ? slot.detach().clone() : torch::zeros_like(p));
  return out;
}

void write_state(torch::optim::Optimizer& optimizer, const torch::Tensor& p, const StateTensors& in) {
  auto key = state_key(optimizer.state(), p);
  if (in.step.item<int64_t>() < 0) {
    optimizer.state().erase(key);
    return;
  }
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(in.step.item<int64_t>()).exp_avg(in.slots[0]).exp_avg_sq(in.slots[1]);
    optimizer.state()[key] = std::move(state);
  } else if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    auto state = std::make_unique<torch::optim::AdamParamState>();
    state->step(in.step.item<int64_t>()).exp_avg(in.slots[0]).exp_avg_sq(in.slots[1]);
    optimizer.state()[key] = std::move(state);
  } else {
    auto state = std::make_unique<torch::optim::SGDParamState>();
    state->momentum_buffer(in.slots[0]);
    optimizer.state()[key] = std::move(state);
  }
}

}  // namespace

OptimizerShards::OptimizerShards(std::vector<torch::Tensor> parameters, const Communicator& group)
    : parameters_(std::move(parameters)), owners_(parameters_.size(), 0), group_(group) {
  std::vector<std::size_t> order(parameters_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return parameters_[a].numel() > parameters_[b].numel(); });
  std::vector<int64_t> load(static_cast<std::size_t>(group_.world_size), 0);
  for (std::size_t i : order) {
    int owner = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owners_[i] = owner;
    load[static_cast<std::size_t>(owner)] += parameters_[i].numel();
  }
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (owners_[i] == group_.rank) owned_.push_back(parameters_[i]);
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

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0, step = 0;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      for (const auto& slot : state_of(optimizer, p, step))
        if (slot.defined()) bytes += slot.numel() * static_cast<int64_t>(slot.element_size());
  return bytes;
}

}  // namespace ddp
