#pragma once
// torch::optim::AdamW stepped a kernel per operation over all parameters at once (ATen's _foreach_
// ops) instead of nine per parameter: on a GPU, the CPU otherwise spends the step queueing hundreds
// of tiny kernels while the GPU waits (85M-parameter GPT on an H200: see docs/gpu.md). Same
// arithmetic, same state and checkpoints: the base class's step is used on the CPU, where the
// _foreach_ ops would run the same per-tensor loop and hold every parameter's denominator at once.

#include <torch/torch.h>

#include <vector>

namespace ddp {

class ForeachAdamW : public torch::optim::AdamW {
 public:
  /// `always` uses the _foreach_ form on any device (the tests compare it with the base class on the CPU).
  ForeachAdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
               bool always = false)
      : torch::optim::AdamW(std::move(groups), std::move(defaults)), always_(always) {}

  torch::Tensor step(LossClosure closure = nullptr) override;

 private:
  bool always_;
};

}  // namespace ddp
