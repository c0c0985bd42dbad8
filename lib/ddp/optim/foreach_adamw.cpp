#include "ddp/optim/foreach_adamw.h"

#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>

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
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  for (auto& group : param_groups_) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    const auto [beta1, beta2] = options.betas();
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<c10::Scalar> bias_roots, step_sizes;  // per parameter: their step counts may differ
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
      const double bias_correction1 = 1 - std::pow(beta1, state.step());
      const double bias_correction2 = 1 - std::pow(beta2, state.step());
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      bias_roots.emplace_back(std::sqrt(bias_correction2));
      step_sizes.emplace_back(-options.lr() / bias_correction1);
    }
    if (params.empty()) continue;
    // torch::optim::AdamW::step's operations, in its order.
    if (options.weight_decay() != 0) at::_foreach_mul_(params, 1 - options.lr() * options.weight_decay());
    at::_foreach_mul_(exp_avgs, beta1);
    at::_foreach_add_(exp_avgs, grads, 1 - beta1);
    at::_foreach_mul_(exp_avg_sqs, beta2);
    at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2);
    auto denominators = at::_foreach_sqrt(exp_avg_sqs);
    at::_foreach_div_(denominators, bias_roots);
    at::_foreach_add_(denominators, options.eps());
    at::_foreach_addcdiv_(params, exp_avgs, denominators, step_sizes);
  }
  return loss;
}

}  // namespace ddp
