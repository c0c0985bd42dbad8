#pragma once
// torch::optim::AdamW stepped without a launch per parameter and operation: on a GPU the CPU otherwise
// spends the step queueing hundreds of tiny kernels while the GPU waits (85M-parameter GPT on an H200:
// see docs/gpu.md). Same arithmetic, same state and checkpoints:
// - on a GPU, ATen's fused kernel (one pass over each parameter's four tensors, as Python's
//   AdamW(fused=True)): AdamW's own from LibTorch 2.3, before it Adam's after the decoupled weight
//   decay as one _foreach_ multiply; its step counts are float32 tensors on the device, kept equal to
//   the state's host counts without reading them;
// - with `always` (the tests, on the CPU), a kernel per operation over all parameters (_foreach_ ops);
// - otherwise (the CPU) the base class's step: the _foreach_ ops would run the same per-tensor loop
//   there and hold every parameter's denominator at once.

#include <torch/torch.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace ddp {

class ForeachAdamW : public torch::optim::AdamW {
 public:
  /// `always` uses the _foreach_ form on the CPU too (the tests compare it with the base class).
  ForeachAdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults,
               bool always = false)
      : torch::optim::AdamW(std::move(groups), std::move(defaults)), always_(always) {}

  torch::Tensor step(LossClosure closure = nullptr) override;

  /// For a captured step (Note [CUDA graphs]): from now on the fused kernel reads each group's
  /// learning rate from a tensor on the parameters' device, which load_lr() fills and step() never
  /// does, so that a replay steps with the rate loaded before it. A CUDA LibTorch 2.3 or later
  /// (std::logic_error otherwise).
  void hold_lr_on_device(const torch::Device& device);
  /// Each group's learning rate (its options') into its device tensor: before each step or replay.
  void load_lr();
  /// Right after the step() a graph captured: notes what it stepped, for replayed(). Throws
  /// std::runtime_error when that step made a device count (a parameter's first gradient): the
  /// graph would set it again at each replay.
  void note_captured();
  /// After a replay of the captured step(): the state's host counts (what checkpoints hold) advance
  /// as that step advanced them; the device's advanced in the replay.
  void replayed();

 private:
  // One group's parameters that have gradients, with their state, already counted for this step.
  struct GroupStep {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<int64_t> steps;  ///< the state's counts, this step included
    std::vector<torch::optim::AdamWParamState*> states;
  };
  GroupStep gather(torch::optim::OptimizerParamGroup& group);
  static void foreach_update(const GroupStep& work, const torch::optim::AdamWOptions& options);
  void fused_update(const GroupStep& work, const torch::optim::AdamWOptions& options, std::size_t group);
  /// The fused kernel's step counts (float32, on each parameter's device), equal to `work.steps`:
  /// made from the state's count when new or when the state was replaced (a checkpoint loaded), else
  /// incremented there, all in one launch.
  std::vector<torch::Tensor> device_steps(const GroupStep& work);

  struct DeviceStep {
    torch::Tensor count;  ///< float32, 0-dim, on the parameter's device
    int64_t host = -1;    ///< the state's count it equals
  };
  std::unordered_map<const c10::TensorImpl*, DeviceStep> device_steps_;
  /// What the last step() advanced: each state, and its device count where the fused kernel has one.
  std::vector<std::pair<torch::optim::AdamWParamState*, DeviceStep*>> last_stepped_, captured_stepped_;
  bool made_counts_ = false;  ///< the last step() made a device count
  std::vector<torch::Tensor> device_lrs_;  ///< a group's learning rate, float32 on the device (hold_lr_on_device)
  bool always_;
};

}  // namespace ddp
