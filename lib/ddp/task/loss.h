#pragma once
// The training objective, chosen by `train.loss`, and the eval metrics that follow from it.

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "ddp/task/ranked_scores.h"

namespace ddp {

class ConfigSchema;

/// `train.loss` and its options (declared in the train section; the task owns them).
struct LossConfig {
  std::string loss = "cross_entropy";  ///< cross_entropy | mse | bce_with_logits
  double label_smoothing = 0;          ///< cross_entropy: as torch.nn.CrossEntropyLoss's
  std::string chunked = "auto";        ///< causal_lm: auto | on | off (Note [Chunked cross-entropy])
};

/// Declares the `LossConfig` keys, bound to `config`, with their defaults, docs and ranges.
void declare_config(ConfigSchema& schema, LossConfig& config);

/// Loss and metrics over model outputs and targets, as torch.nn's losses compute them.
class Loss {
 public:
  explicit Loss(const LossConfig& config) : config_(config) {}

  /// Labels as this loss takes them: int64 class indices [N] for cross_entropy ([N, 1] is taken
  /// as [N]; float labels must be finite whole numbers that an int64 holds), float32 for mse and
  /// bce_with_logits (whose targets must lie in [0, 1]). FileError naming `source`, the first
  /// sample at fault, or the shape.
  torch::Tensor prepare_targets(const torch::Tensor& labels, const std::string& source,
                                const torch::Tensor& source_rows = {}) const;

  /// Checks that `output` fits `targets` (classification: [B, C] with C > `max_class`, the largest
  /// label, which `max_class_source` holds; otherwise as many values per sample as the targets).
  /// UserError naming both shapes.
  void check_output(const torch::Tensor& output, const torch::Tensor& targets, int64_t max_class,
                    const std::string& max_class_source) const;

  /// The mean loss over the batch.
  torch::Tensor mean(const torch::Tensor& output, const torch::Tensor& targets) const;

  /// The eval metrics: loss and accuracy for classification, mse and mae for regression
  /// (bce_with_logits' AUC comes from ranked_scores()).
  std::vector<std::string> metric_names() const;

  /// Per-sample metrics summed over the batch, float64 [metric_names().size()]; bce_with_logits
  /// also keeps the batch's logits and targets in ranked_scores().
  torch::Tensor metric_sums(const torch::Tensor& output, const torch::Tensor& targets) const;
  /// bce_with_logits: the scores the evaluation's AUC ranks (Note [Exact AUC]); else null.
  RankedScores* ranked_scores() const { return config_.loss == "bce_with_logits" ? &ranked_ : nullptr; }

 private:
  bool classes() const { return config_.loss == "cross_entropy"; }
  LossConfig config_;
  mutable RankedScores ranked_;  // what metric_sums saw since the evaluator last cleared it
};

}  // namespace ddp
