#include "ddp/task/ranked_scores.h"

#include <torch/torch.h>

namespace ddp {

void RankedScores::clear() {
  scores_.clear();
  weights_.clear();
}

void RankedScores::add(const torch::Tensor& scores, const torch::Tensor& positive_weights) {
  // float32, as the logits are (or finer than their bf16): 8 bytes a sample held to the end.
  scores_.push_back(scores.detach().reshape(-1).to(torch::kFloat));
  weights_.push_back(positive_weights.detach().reshape(-1).to(torch::kFloat));
}

void RankedScores::drop_last() {
  if (scores_.empty()) return;
  scores_.pop_back();
  weights_.pop_back();
}

torch::Tensor RankedScores::stacked(const torch::Device& device) const {
  if (scores_.empty()) return torch::zeros({2, 0}, torch::dtype(torch::kFloat).device(device));
  return torch::stack({torch::cat(scores_), torch::cat(weights_)}).to(device);
}

std::optional<double> area_under_roc(const torch::Tensor& scores, const torch::Tensor& positive_weights) {
  auto [sorted, order] = scores.to(torch::kCPU, torch::kDouble).reshape(-1).sort();
  auto positives = positive_weights.to(torch::kCPU, torch::kDouble).reshape(-1).index_select(0, order);
  // Equal scores form one group: its positives beat the negatives of the groups below and tie its own.
  auto [values, group, counts] = torch::unique_consecutive(sorted, /*return_inverse=*/true);
  (void)counts;
  const int64_t groups = values.numel();
  auto by_group = [&](const torch::Tensor& w) {
    return torch::zeros({groups}, torch::kDouble).index_add_(0, group, w);
  };
  auto pos = by_group(positives), neg = by_group(1 - positives);
  auto below = neg.cumsum(0) - neg;
  const double all_positive = pos.sum().item<double>(), all_negative = neg.sum().item<double>();
  if (all_positive <= 0 || all_negative <= 0) return std::nullopt;
  return (pos * (below + 0.5 * neg)).sum().item<double>() / (all_positive * all_negative);
}

}  // namespace ddp
