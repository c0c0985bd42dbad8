#pragma once
// Note [Exact AUC]: the area under the ROC curve ranks every score of the eval split together,
// which no sum over batches and ranks can give exactly (a histogram of the logits, which this
// replaced, tied every pair within a bin: a model whose logits lay close together, or beyond the
// bins' range, was given a wrong AUC). So each rank keeps its scores, the evaluator gathers them
// on rank 0 at the end (8 bytes a sample there; each other rank sends its own and holds no more),
// and the AUC comes from their ranking, ties a half, as sklearn's roc_auc_score computes it
// (several outputs a sample are pooled: its micro average); rank 0 gives every rank the area. A score computed by several ranks
// alike (a tensor group's) is gathered from each: every pair counts as often, so the AUC is the same.

#include <torch/types.h>

#include <optional>
#include <vector>

namespace ddp {

/// The scores an evaluation ranks over its whole split, each with its weight as a positive (its
/// target, in [0, 1]; 1 - target as a negative), kept batch by batch where they were computed.
class RankedScores {
 public:
  void clear();
  void add(const torch::Tensor& scores, const torch::Tensor& positive_weights);
  /// Forgets the last add (a batch computed only to keep other ranks company).
  void drop_last();
  /// The scores and the weights as float32 [2, n] on `device` (n: 0 where none were added).
  torch::Tensor stacked(const torch::Device& device) const;

 private:
  std::vector<torch::Tensor> scores_, weights_;
};

/// The share of (positive, negative) weight pairs whose scores order them rightly, tied scores a
/// half; nullopt where the scores have no positive or no negative weight.
std::optional<double> area_under_roc(const torch::Tensor& scores, const torch::Tensor& positive_weights);

}  // namespace ddp
