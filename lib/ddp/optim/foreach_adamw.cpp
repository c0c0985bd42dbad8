#include "ddp/optim/foreach_adamw.h"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

// AdamW's fused kernel, with the learning rate as a number or as a tensor: LibTorch 2.3 (as
// step_graph.cpp's capture). Before it, Adam's fused kernel after a decay of our own.
#define DDP_FUSED_ADAMW_TENSOR_LR (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))

namespace ddp {
namespace {

// The optimizer's state is keyed by the parameter's TensorImpl: its address as text in LibTorch
// 1.x, the pointer itself in 2.x.
template <typename Key>
Key state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;  // c10::guts::to_string's form
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// The fused kernel takes tensors of one device and one floating dtype (as Python's AdamW(fused=True)
// groups them), each dense and laid out as its gradient (ATen's fast-path rule); anything else takes
// the _foreach_ form.
bool fusable(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads) {
  const auto& first = params.front();
  if (!first.is_cuda() || !at::isFloatingType(first.scalar_type())) return false;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto &p = params[i], &g = grads[i];
    if (p.device() != first.device() || p.scalar_type() != first.scalar_type() || g.device() != first.device() ||
        g.scalar_type() != first.scalar_type() || g.strides() != p.strides() || !p.is_non_overlapping_and_dense())
      return false;
  }
  return true;
}

}  // namespace

torch::Tensor ForeachAdamW::step(LossClosure closure) {
  bool on_gpu = false;
  for (const auto& group : param_groups_)
    for (const auto& p : group.params()) on_gpu = on_gpu || (p.grad().defined() && !p.is_cpu());
  auto& defaults = static_cast<const torch::optim::AdamWOptions&>(param_groups_.front().options());
  if ((!always_ && !on_gpu) || defaults.amsgrad()) return torch::optim::AdamW::step(std::move(closure));

  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  last_stepped_.clear();
  made_counts_ = false;
  for (std::size_t g = 0; g < param_groups_.size(); ++g) {
    GroupStep work = gather(param_groups_[g]);
    if (work.params.empty()) continue;
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(param_groups_[g].options());
    if (fusable(work.params, work.grads)) {
      fused_update(work, options, g);
    } else {
      TORCH_CHECK(device_lrs_.empty(), "ForeachAdamW: a learning rate held on the device needs the fused kernel, "
                                       "which these parameters cannot take (mixed devices, dtypes or layouts)");
      foreach_update(work, options);
      for (auto* state : work.states) last_stepped_.emplace_back(state, nullptr);
    }
  }
  return loss;
}

void ForeachAdamW::hold_lr_on_device(const torch::Device& device) {
#if DDP_FUSED_ADAMW_TENSOR_LR
  device_lrs_.clear();
  for (std::size_t g = 0; g < param_groups_.size(); ++g)
    device_lrs_.push_back(torch::zeros({}, torch::TensorOptions(torch::kFloat).device(device)));
  load_lr();
#else
  (void)device;
  throw std::logic_error("ForeachAdamW: a learning rate held on the device needs LibTorch 2.3 or later");
#endif
}

void ForeachAdamW::load_lr() {
  for (std::size_t g = 0; g < device_lrs_.size(); ++g)
    device_lrs_[g].fill_(static_cast<const torch::optim::AdamWOptions&>(param_groups_[g].options()).lr());
}

void ForeachAdamW::note_captured() {
  if (made_counts_)
    throw std::runtime_error("a parameter had its first gradient in the captured step, so its step count would "
                             "start again at each replay");
  captured_stepped_ = last_stepped_;
}

void ForeachAdamW::replayed() {
  for (auto& [state, count] : captured_stepped_) {
    state->step(state->step() + 1);
    if (count) count->host += 1;
  }
}

ForeachAdamW::GroupStep ForeachAdamW::gather(torch::optim::OptimizerParamGroup& group) {
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  GroupStep work;
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    TORCH_CHECK(!p.grad().is_sparse(), "AdamW does not support sparse gradients");
    auto& slot = state_[state_key<Key>(p)];
    if (!slot) {
      auto fresh = std::make_unique<torch::optim::AdamWParamState>();
      fresh->step(0);
      fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      slot = std::move(fresh);
    }
    auto& state = static_cast<torch::optim::AdamWParamState&>(*slot);
    state.step(state.step() + 1);
    work.params.push_back(p);
    work.grads.push_back(p.grad());
    work.exp_avgs.push_back(state.exp_avg());
    work.exp_avg_sqs.push_back(state.exp_avg_sq());
    work.steps.push_back(state.step());
    work.states.push_back(&state);
  }
  return work;
}

void ForeachAdamW::foreach_update(const GroupStep& work, const torch::optim::AdamWOptions& options) {
  const auto [beta1, beta2] = options.betas();
  // Per parameter: their step counts may differ (a parameter without a gradient skips its step).
  std::vector<c10::Scalar> bias_roots, step_sizes;
  for (int64_t step : work.steps) {
    bias_roots.emplace_back(std::sqrt(1 - std::pow(beta2, step)));
    step_sizes.emplace_back(-options.lr() / (1 - std::pow(beta1, step)));
  }
  // torch::optim::AdamW::step's operations, in its order.
  if (options.weight_decay() != 0) at::_foreach_mul_(work.params, 1 - options.lr() * options.weight_decay());
  at::_foreach_mul_(work.exp_avgs, beta1);
  at::_foreach_add_(work.exp_avgs, work.grads, 1 - beta1);
  at::_foreach_mul_(work.exp_avg_sqs, beta2);
  at::_foreach_addcmul_(work.exp_avg_sqs, work.grads, work.grads, 1 - beta2);
  auto denominators = at::_foreach_sqrt(work.exp_avg_sqs);
  at::_foreach_div_(denominators, bias_roots);
  at::_foreach_add_(denominators, options.eps());
  at::_foreach_addcdiv_(work.params, work.exp_avgs, denominators, step_sizes);
}

void ForeachAdamW::fused_update(const GroupStep& work, const torch::optim::AdamWOptions& options, std::size_t group) {
  const auto [beta1, beta2] = options.betas();
  std::vector<torch::Tensor> counts = device_steps(work);
  for (std::size_t i = 0; i < work.states.size(); ++i)
    last_stepped_.emplace_back(work.states[i], &device_steps_.at(work.params[i].unsafeGetTensorImpl()));
#if DDP_FUSED_ADAMW_TENSOR_LR
  // AdamW's own kernel, its decoupled decay included; the rate from the device where it is held
  // there, so that a captured step and an eager one run the same arithmetic.
  if (!device_lrs_.empty())
    at::_fused_adamw_(work.params, work.grads, work.exp_avgs, work.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, counts,
                      device_lrs_.at(group), beta1, beta2, options.weight_decay(), options.eps(), /*amsgrad=*/false,
                      /*maximize=*/false);
  else  // the rate as float32, as the device's tensor holds it: eager and captured steps agree to the bit
    at::_fused_adamw_(work.params, work.grads, work.exp_avgs, work.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, counts,
                      static_cast<double>(static_cast<float>(options.lr())), beta1, beta2, options.weight_decay(),
                      options.eps(), /*amsgrad=*/false, /*maximize=*/false);
  return;
#else
  (void)group;
#endif
  // Before LibTorch 2.3: AdamW's decoupled decay first, as the base class, then Adam's kernel with
  // weight decay 0 (its own is Adam's, L2).
  if (options.weight_decay() != 0) at::_foreach_mul_(work.params, 1 - options.lr() * options.weight_decay());
  at::_fused_adam_(work.params, work.grads, work.exp_avgs, work.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, counts,
                   options.lr(), beta1, beta2, /*weight_decay=*/0.0, options.eps(), /*amsgrad=*/false,
                   /*maximize=*/false);
}

std::vector<torch::Tensor> ForeachAdamW::device_steps(const GroupStep& work) {
  std::vector<torch::Tensor> counts, counted_on;
  counts.reserve(work.params.size());
  for (std::size_t i = 0; i < work.params.size(); ++i) {
    const torch::Tensor& p = work.params[i];
    const int64_t step = work.steps[i];
    DeviceStep& entry = device_steps_[p.unsafeGetTensorImpl()];
    if (entry.count.defined() && entry.host == step - 1 && entry.count.device() == p.device())
      counted_on.push_back(entry.count);
    else {  // new, or the state was replaced since (a checkpoint loaded): from the state's count
      entry.count = torch::full({}, static_cast<double>(step), p.options().dtype(torch::kFloat));
      made_counts_ = true;
    }
    entry.host = step;
    counts.push_back(entry.count);
  }
  if (!counted_on.empty()) at::_foreach_add_(counted_on, 1);  // on the device: nothing is read back
  return counts;
}

}  // namespace ddp
