#pragma once
// Image classification: MNIST-format images (IDX files or synthetic), a registry model, cross-entropy.

#include <optional>

#include "ddp/data/dataset.h"
#include "ddp/task/task.h"

namespace ddp {

/// The task of the built-in models: logits from normalised images, cross-entropy against labels.
class ImageClassification : public Task {
 public:
  /// Loads the splits `data` names (checking image size and label range on both), builds `model`.
  ImageClassification(const DataConfig& data, const ModelConfig& model, const TaskContext& context);

  torch::nn::Module& model() override { return *model_; }
  int64_t size(Split split) const override;
  Batch make_batch(Split split, const torch::Tensor& indices) const override;
  torch::Tensor loss(const Batch& batch) override;
  std::vector<std::string> metric_names() const override { return {"loss", "accuracy"}; }
  torch::Tensor metric_sums(const Batch& batch) override;

 private:
  void load(const DataConfig& data, int64_t num_classes);
  void check(const Dataset& set, int64_t num_classes) const;

  double mean_;
  double std_;
  Dataset train_;
  std::optional<Dataset> eval_;
  std::shared_ptr<Model> model_;
};

}  // namespace ddp
