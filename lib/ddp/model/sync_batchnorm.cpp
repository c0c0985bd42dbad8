#include "ddp/model/sync_batchnorm.h"

#include <torch/autograd.h>

namespace ddp {
namespace {

// Note [SyncBatchNorm gradients]
// The statistics are sums over every rank's samples, so the loss of each rank depends on every
// other rank's inputs through them. Summing over ranks is linear, and its gradient is the same
// sum of the incoming gradients: the backward of this all-reduce is another all-reduce. With it,
// autograd gives each rank the gradient of the sum of all ranks' losses with respect to its own
// inputs, which the gradient reducer's average then turns into the gradient of the global mean
// loss, exactly as for one process with the whole batch (PyTorch's SyncBatchNorm backward
// all-reduces the same two sums).
class CrossRankSumFunction : public torch::autograd::Function<CrossRankSumFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& local,
                               const CrossRankSum* sum) {
    // The module outlives every graph built from its forward, so its function may be kept by address.
    ctx->saved_data["sum"] = reinterpret_cast<int64_t>(sum);
    return (*sum)(local.detach().clone());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* sum = reinterpret_cast<const CrossRankSum*>(ctx->saved_data["sum"].toInt());
    return {(*sum)(grads[0].clone()), torch::Tensor()};
  }
};

}  // namespace

SyncBatchNorm2dImpl::SyncBatchNorm2dImpl(int64_t channels, CrossRankSum sum, double eps, double momentum)
    : sum_(std::move(sum)), eps_(eps), momentum_(momentum) {
  // BatchNorm2d's registration order, so python_state_dict() lists the same keys in the same order.
  weight = register_parameter("weight", torch::ones({channels}));
  bias = register_parameter("bias", torch::zeros({channels}));
  running_mean = register_buffer("running_mean", torch::zeros({channels}));
  running_var = register_buffer("running_var", torch::ones({channels}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
}

torch::Tensor SyncBatchNorm2dImpl::forward(const torch::Tensor& input) {
  // Statistics in float32 under autocast too: bfloat16 holds counts only up to 256 exactly.
  const torch::Tensor x = input.scalar_type() == torch::kBFloat16 || input.scalar_type() == torch::kHalf
                              ? input.to(torch::kFloat)
                              : input;
  if (!is_training())
    return torch::batch_norm(x, weight, bias, running_mean, running_var, /*training=*/false, momentum_, eps_,
                             /*cudnn_enabled=*/true);
  TORCH_CHECK(x.dim() == 4, "SyncBatchNorm2d expects [N, C, H, W], got ", x.sizes());
  const int64_t channels = x.size(1);
  const std::vector<int64_t> reduce_dims = {0, 2, 3};
  auto per_channel = [channels](const torch::Tensor& t) { return t.view({1, channels, 1, 1}); };

  // Two passes (mean, then the squared deviations from it), each one sum over ranks: as accurate
  // as one process's BatchNorm, where E[x²] - E[x]² would cancel.
  auto local_count = torch::full({1}, static_cast<double>(x.numel() / channels), x.options());
  auto totals = CrossRankSumFunction::apply(torch::cat({x.sum(reduce_dims), local_count}), &sum_);
  auto count = totals.narrow(0, channels, 1).detach();
  auto mean = totals.narrow(0, 0, channels) / count;
  auto centered = x - per_channel(mean);
  auto variance = CrossRankSumFunction::apply(centered.square().sum(reduce_dims), &sum_) / count;
  auto y = centered * per_channel(torch::rsqrt(variance + eps_) * weight) + per_channel(bias);

  torch::NoGradGuard no_grad;
  double n = count.item<double>();
  running_mean.mul_(1 - momentum_).add_(mean.detach(), momentum_);
  // The running variance is unbiased, as BatchNorm's is.
  running_var.mul_(1 - momentum_).add_(variance.detach() * (n / std::max(1.0, n - 1)), momentum_);
  num_batches_tracked.add_(1);
  return y;
}

}  // namespace ddp
