#pragma once
// Supervised learning: features in, one output per sample, a loss against its label. The built-in
// image classifiers, DLRM and TorchScript modules train this way, on IDX, synthetic, NPY, CSV or Criteo data.

#include <optional>

#include "ddp/data/dataset.h"
#include "ddp/data/normalizer.h"
#include "ddp/task/loss.h"
#include "ddp/task/task.h"

namespace ddp {

/// The model's output for normalised features, scored by `train.loss`.
class SupervisedTask : public Task {
 public:
  /// Loads the splits `data` names, checks them against the model and the loss, builds `model`.
  SupervisedTask(const DataConfig& data, const ModelConfig& model, const LossConfig& loss, const TaskContext& context);

  torch::nn::Module& model() override { return *model_; }
  int64_t size(Split split) const override;
  std::string data_content() const override;
  Batch make_batch(Split split, const torch::Tensor& indices) const override;
  torch::Tensor loss(const Batch& batch) override;
  torch::Tensor output_loss(const torch::Tensor& output, const Batch& batch) override;
  torch::Tensor output_metric_sums(const torch::Tensor& output, const Batch& batch) override;
  std::vector<std::string> metric_names() const override { return loss_.metric_names(); }
  torch::Tensor metric_sums(const Batch& batch) override;
  RankedScores* ranked_scores() override { return loss_.ranked_scores(); }
  void save_model(const std::string& output_dir) const override;

 private:
  int64_t check(const Dataset& set, const ModelConfig& model, const std::string& key) const;
  torch::Tensor forward(const Batch& batch);
  /// Checks the first output against the targets and the loss.
  const torch::Tensor& checked(const torch::Tensor& output, const Batch& batch);

  Loss loss_;
  Dataset train_;
  std::optional<Dataset> eval_;
  Normalizer normalizer_;
  int64_t max_class_ = 0;        ///< the largest class label in either split (cross_entropy)
  std::string max_class_source_;  ///< the split's source that holds it
  bool output_checked_ = false;  ///< the first batch's output was checked against its targets
  std::shared_ptr<Model> model_;
};

}  // namespace ddp
