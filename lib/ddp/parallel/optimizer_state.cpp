#include "ddp/parallel/optimizer_state.h"

#include <sstream>
#include <type_traits>

#include "ddp/common/error.h"

namespace ddp {
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

}  // namespace

std::string optimizer_name(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return "sgd";
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return "adamw";
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return "adam";
  return "";
}

int slots_of(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return 1;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer) || dynamic_cast<const torch::optim::AdamW*>(&optimizer))
    return 2;
  throw UserError("dist.shard: sharding supports sgd, adam and adamw only");
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

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0, step = 0;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      for (const auto& slot : state_of(optimizer, p, step))
        if (slot.defined()) bytes += slot.numel() * static_cast<int64_t>(slot.element_size());
  return bytes;
}

}  // namespace ddp
