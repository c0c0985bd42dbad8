#include "ddp/optim/row_updates.h"

#include <ATen/ATen.h>

namespace ddp {

std::pair<torch::Tensor, torch::Tensor> coalesce_rows(const torch::Tensor& indices, const torch::Tensor& grads) {
  auto [rows, inverse, counts] = at::_unique2(indices, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/false);
  (void)counts;
  torch::Tensor summed = torch::zeros({rows.size(0), grads.size(1)}, grads.options());
  summed.index_add_(0, inverse, grads);
  return {rows, summed};
}

RowUpdater::RowUpdater(const std::string& method, int64_t rows, double eps, const torch::TensorOptions& options)
    : eps_(eps) {
  if (method == "rowwise_adagrad") sums_ = torch::zeros({rows}, options.dtype(torch::kFloat));
}

void RowUpdater::update(torch::Tensor& table, const torch::Tensor& rows, const torch::Tensor& grads, double lr) {
  torch::NoGradGuard no_grad;
  if (rows.numel() == 0) return;
  torch::Tensor step = grads.to(table.scalar_type());
  if (sums_.defined()) {
    torch::Tensor sums = sums_.index_select(0, rows) + grads.to(torch::kFloat).square().mean(1);
    sums_.index_copy_(0, rows, sums);
    step = step / (sums.sqrt() + eps_).unsqueeze(1).to(table.scalar_type());
  }
  table.index_copy_(0, rows, table.index_select(0, rows) - lr * step);
}

}  // namespace ddp
