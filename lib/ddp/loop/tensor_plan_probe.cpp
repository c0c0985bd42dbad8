#include "ddp/loop/tensor_plan_probe.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/utils.h>

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <mutex>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/parallel/tensor_shards.h"

namespace ddp {

// Note [Probing a tensor plan]
// Note [Checking a tensor plan] refuses what can be seen in a plan's shape; what a module's own code
// does with a slice cannot be seen there. A TorchScript attention that takes its head count from a
// constant, `q.view(b, t, self.heads, -1)`, runs on half the columns as the same number of heads of
// half the width: no shape error, another model, trained silently. So the split module runs once
// on the first training sample, in eval mode (no dropout, no random draw), and its output must be
// the whole module's, to rounding: float32 row-parallel sums add in another order, so a relative
// difference of 1e-4 passes and a changed computation, off by tens of percent, does not. Every
// rank computes the same, so all refuse together, before any step.

namespace {

constexpr double kTolerance = 1e-4;

const char* const kCause =
    "the module's code likely assumes whole layers, such as a head count taken from a constant "
    "(q.view(b, t, self.n_head, -1)); take it from the tensor (q.view(b, t, -1, head_dim)), as torchtitan's "
    "Llama does, or change the plan";

}  // namespace

TensorPlanProbe::TensorPlanProbe(Task& task) : task_(task) {
  auto sample = torch::zeros({1}, torch::kLong);
  const auto parameters = task.model().parameters();
  const torch::Device device = parameters.empty() ? torch::Device(torch::kCPU) : parameters.front().device();
  // make_batch may draw (augmentation): the probe must leave the training's random stream as it was.
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  const torch::Tensor state = generator.get_state();
  input_ = task.make_batch(Split::kTrain, sample).inputs.at(0).to(device);
  generator.set_state(state);
  whole_ = output();
}

torch::Tensor TensorPlanProbe::output() const {
  torch::NoGradGuard no_grad;
  // TF32 (train.tf32) rounds products to 10 bits, a thousandth: both runs take float32's own.
  at::Context& context = at::globalContext();
  const bool tf32_cublas = context.allowTF32CuBLAS(), tf32_cudnn = context.allowTF32CuDNN();
  context.setAllowTF32CuBLAS(false);
  context.setAllowTF32CuDNN(false);
  torch::nn::Module& model = task_.model();
  const bool was_training = model.is_training();
  model.eval();
  torch::Tensor out;
  try {
    out = dynamic_cast<Model&>(model).forward(input_).to(torch::kFloat);
  } catch (...) {
    model.train(was_training);
    context.setAllowTF32CuBLAS(tf32_cublas);
    context.setAllowTF32CuDNN(tf32_cudnn);
    throw;
  }
  model.train(was_training);
  context.setAllowTF32CuBLAS(tf32_cublas);
  context.setAllowTF32CuDNN(tf32_cudnn);
  return out;
}

double TensorPlanProbe::check(const TensorShards& shards) const {
  torch::Tensor split;
  try {
    split = output();
  } catch (const std::exception& e) {  // the whole module ran on it: the split is the cause
    const std::string what = e.what();
    throw ConfigError("dist.tensor_plan: the split module fails on the first training sample (" +
                      what.substr(0, what.find('\n')) + "): " + kCause);
  }
  torch::Tensor whole = whole_;
  if (shards.splits_output() && split.dim() == whole.dim() && split.dim() > 0)
    whole = whole.narrow(-1, shards.output_first(), std::min(split.size(-1), whole.size(-1) - shards.output_first()));
  if (split.sizes() != whole.sizes())
    throw ConfigError(fmt::format("dist.tensor_plan: the split module's output for the first training sample has "
                                  "shape {}, the whole module's {}: {}",
                                  format_shape(split.sizes().vec()), format_shape(whole.sizes().vec()), kCause));
  const double scale = whole.norm().item<double>();
  const double difference = (split - whole).norm().item<double>() / std::max(scale, 1e-12);
  if (!(difference <= kTolerance))
    throw ConfigError(fmt::format("dist.tensor_plan: the split module's output for the first training sample "
                                  "differs from the whole module's by {:.3g} (relative; rounding gives under {:g}): {}",
                                  difference, kTolerance, kCause));
  return difference;
}

}  // namespace ddp
