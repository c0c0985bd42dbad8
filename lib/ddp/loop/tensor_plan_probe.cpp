#include "ddp/loop/tensor_plan_probe.h"

#include <ATen/Context.h>
#include <torch/utils.h>

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <limits>
#include <mutex>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/model/rank_random.h"
#include "ddp/parallel/tensor_shards.h"

namespace ddp {

// Note [Probing a tensor plan]
// Note [Checking a tensor plan] refuses what can be seen in a plan's shape; what a module's own code
// does with a slice cannot be seen there. A TorchScript attention that takes its head count from a
// constant, `q.view(b, t, self.heads, -1)`, runs on half the columns as the same number of heads of
// half the width: no shape error, another model, trained silently. So the split module runs once
// on the first training sample, in eval mode (no dropout, no random draw), and its output must be
// the whole module's, to rounding: row-parallel sums add in another order, so a relative difference
// under 1e-4 (a 16-bit output's: 5e-2) passes, and a changed computation, off by a percent or more
// in float32, does not. Products run in full float32 (TF32 rounds them to
// a thousandth); the trainer sets train.tf32 again after the pass. Every rank computes the same, so
// all refuse together, before any step.

namespace {

const char* const kCause =
    "the module's code likely assumes whole layers, such as a head count taken from a constant "
    "(q.view(b, t, self.n_head, -1)); take it from the tensor (q.view(b, t, -1, head_dim)), as torchtitan's "
    "Llama does, or change the plan";

// Eval mode for its lifetime, and full float32 products (see the Note).
class ProbeMode {
 public:
  explicit ProbeMode(torch::nn::Module& model) : model_(model), was_training_(model.is_training()) {
    model_.eval();
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
  }
  ~ProbeMode() { model_.train(was_training_); }
  ProbeMode(const ProbeMode&) = delete;
  ProbeMode& operator=(const ProbeMode&) = delete;

 private:
  torch::nn::Module& model_;
  bool was_training_;
};

}  // namespace

TensorPlanProbe::TensorPlanProbe(Task& task) : task_(task) {
  auto sample = torch::zeros({1}, torch::kLong);
  const auto parameters = task.model().parameters();
  const torch::Device device = parameters.empty() ? torch::Device(torch::kCPU) : parameters.front().device();
  // make_batch may draw (augmentation): the probe must leave the rank's random stream as it was.
  // Not under the generator's lock, which a draw takes itself.
  at::Generator generator = rank_cpu_generator();
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state();
  }
  input_ = task.make_batch(Split::kTrain, sample).inputs.at(0).to(device);
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
  whole_ = output();
}

torch::Tensor TensorPlanProbe::output() const {
  torch::NoGradGuard no_grad;
  ProbeMode mode(task_.model());
  return dynamic_cast<Model&>(task_.model()).forward(input_);
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
  // Masked logits (-inf) are the same where both are: compared where both are finite, after both
  // agree on where they are not.
  // A 16-bit module's own rounding is a percent: only a gross change shows there.
  const double tolerance = c10::elementSize(whole.scalar_type()) >= 4 ? 1e-4 : 5e-2;
  const torch::Tensor a = split.to(torch::kFloat), b = whole.to(torch::kFloat);
  const torch::Tensor finite = torch::isfinite(a), nan = torch::isnan(a);
  const bool same_elsewhere = torch::equal(finite, torch::isfinite(b)) && torch::equal(nan, torch::isnan(b)) &&
                              torch::equal(a.masked_fill(finite | nan, 0), b.masked_fill(finite | nan, 0));
  double difference = std::numeric_limits<double>::infinity();
  if (same_elsewhere) {
    const torch::Tensor x = a.masked_fill(~finite, 0), y = b.masked_fill(~finite, 0);
    difference = (x - y).norm().item<double>() / std::max(y.norm().item<double>(), 1e-12);
  }
  if (!(difference <= tolerance))
    throw ConfigError(fmt::format("dist.tensor_plan: the split module's output for the first training sample "
                                  "differs from the whole module's by {:.3g} (relative; rounding gives under {:.2g}): {}",
                                  difference, tolerance, kCause));
  return difference;
}

}  // namespace ddp
