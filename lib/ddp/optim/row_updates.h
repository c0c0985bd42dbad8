#pragma once
// Sparse updates of embedding tables: only the rows a step touched change (Note [Row updates]).

#include <torch/types.h>

#include <string>

namespace ddp {

// Note [Row updates]
// A table's gradient is a few rows of a large matrix; a dense optimizer would read and write every
// row each step (and Adam would move rows no batch touched). TorchRec's fused optimizers update the
// touched rows alone, and so does this: `sgd`, w -= lr·g; `rowwise_adagrad` (fbgemm's
// EXACT_ROWWISE_ADAGRAD), one sum of squares per row, s += mean(g²) over the row, then
// w -= lr·g / (sqrt(s) + eps). A row no step touched keeps its bits. The gradient rows of one step
// are first summed per row (coalesce), whatever order the lookups came in.

/// The rows of `indices` [n] once each, ascending, and `grads` [n, dim] summed per row.
std::pair<torch::Tensor, torch::Tensor> coalesce_rows(const torch::Tensor& indices, const torch::Tensor& grads);

/// One table's (or table shard's) rows and their optimizer state.
class RowUpdater {
 public:
  /// `method`: sgd or rowwise_adagrad, for a table of `rows` rows on `options`' device; `eps` for adagrad.
  RowUpdater(const std::string& method, int64_t rows, double eps, const torch::TensorOptions& options);

  /// Applies `grads` [n, dim] of the distinct rows `rows` [n] to `table` at learning rate `lr`.
  void update(torch::Tensor& table, const torch::Tensor& rows, const torch::Tensor& grads, double lr);

  /// The per-row state (rowwise_adagrad's sums, float32 [rows]); undefined for sgd, which keeps none.
  const torch::Tensor& state() const { return sums_; }

 private:
  double eps_;
  torch::Tensor sums_;
};

}  // namespace ddp
