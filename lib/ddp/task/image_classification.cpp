#include "ddp/task/image_classification.h"

#include "ddp/common/error.h"
#include "ddp/data/dataset_cache.h"
#include "ddp/data/synthetic_dataset.h"

namespace ddp {

ImageClassification::ImageClassification(const DataConfig& data, const ModelConfig& model,
                                         const TaskContext& context)
    : mean_(data.mean), std_(data.std) {
  load(data, model.num_classes);
  check(train_, model.num_classes);
  if (eval_) check(*eval_, model.num_classes);
  model_ = make_model(model, context.model);
  model_->to(context.device);
}

void ImageClassification::load(const DataConfig& data, int64_t num_classes) {
  if (data.dataset == "synthetic") {
    // Train and eval come from one seed, so they share class prototypes.
    Dataset all = make_synthetic_dataset(data.synthetic_train_samples + data.synthetic_test_samples, num_classes,
                                         static_cast<uint64_t>(data.synthetic_seed));
    auto split = [&](int64_t begin, int64_t end) {
      return Dataset{all.images.slice(0, begin, end), all.labels.slice(0, begin, end), "synthetic", nullptr};
    };
    train_ = split(0, data.synthetic_train_samples);
    if (data.eval_split == "test") eval_ = split(data.synthetic_train_samples, all.size());
  } else {
    std::string cache = resolve_cache_dir(data.cache_dir);
    train_ = load_idx_split_cached(data.path, "train", cache);
    if (data.eval_split == "test") eval_ = load_idx_split_cached(data.path, "test", cache);
  }
  if (data.eval_split == "train") eval_ = train_;
}

// At load, so that a bad eval split fails before training rather than after the first epoch.
void ImageClassification::check(const Dataset& set, int64_t num_classes) const {
  if (set.size() == 0) throw FileError(set.source + " holds no samples (data.path)");
  auto [height, width] = set.image_size();
  if (height != kInputHeight || width != kInputWidth)
    throw FileError(set.source + " holds " + std::to_string(height) + "x" + std::to_string(width) +
                    " images; the models take " + std::to_string(kInputHeight) + "x" + std::to_string(kInputWidth) +
                    " (data.path)");
  int64_t min_label = set.labels.min().item<int64_t>();
  int64_t max_label = set.labels.max().item<int64_t>();
  if (min_label < 0) throw FileError(set.source + " holds a negative label (" + std::to_string(min_label) + ")");
  if (max_label >= num_classes)
    throw ConfigError("model.num_classes: " + std::to_string(num_classes) + " is too few for " + set.source +
                      ", whose labels go up to " + std::to_string(max_label));
}

int64_t ImageClassification::size(Split split) const {
  if (split == Split::kTrain) return train_.size();
  return eval_ ? eval_->size() : 0;
}

Batch ImageClassification::make_batch(Split split, const torch::Tensor& indices) const {
  return gather_batch(split == Split::kTrain ? train_ : *eval_, indices, mean_, std_);
}

torch::Tensor ImageClassification::loss(const Batch& batch) {
  return torch::nn::functional::cross_entropy(model_->forward(batch.inputs[0]), batch.targets);
}

torch::Tensor ImageClassification::metric_sums(const Batch& batch) {
  auto logits = model_->forward(batch.inputs[0]);
  namespace F = torch::nn::functional;
  auto loss_sum = F::cross_entropy(logits, batch.targets, F::CrossEntropyFuncOptions().reduction(torch::kSum));
  auto correct = logits.argmax(1).eq(batch.targets).sum();
  return torch::stack({loss_sum.to(torch::kDouble), correct.to(torch::kDouble)});
}

}  // namespace ddp
