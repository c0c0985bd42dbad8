#pragma once
// One parameter's optimizer state as plain tensors, read from and written into LibTorch's
// optimizers: what sharded data parallelism moves between ranks and into whole checkpoints.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

/// A parameter's state: its moments or momentum, and its step count (-1: no state yet, e.g. a
/// parameter that has had no gradient). Shapes are the parameter's, state or not, so every rank
/// knows what a collective carries.
struct StateTensors {
  torch::Tensor step;                ///< int64 [1]
  std::vector<torch::Tensor> slots;  ///< exp_avg, exp_avg_sq (adam, adamw); momentum_buffer (sgd)
};

/// How many state tensors `optimizer` keeps per parameter; UserError for optimizers other than
/// sgd, adam and adamw.
int slots_of(const torch::optim::Optimizer& optimizer);

/// optim.name of `optimizer`: sgd, adam or adamw ("" for another kind).
std::string optimizer_name(const torch::optim::Optimizer& optimizer);

/// `p`'s state in `optimizer`, copied (zeros and step -1 where it has none).
StateTensors read_state(const torch::optim::Optimizer& optimizer, const torch::Tensor& p);

/// Sets `p`'s state in `optimizer` to `in` (removes it for step -1); the tensors are kept, not copied.
void write_state(torch::optim::Optimizer& optimizer, const torch::Tensor& p, const StateTensors& in);

/// Bytes of state `optimizer` holds (moments, momentum buffers), for the memory accounting.
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

}  // namespace ddp
