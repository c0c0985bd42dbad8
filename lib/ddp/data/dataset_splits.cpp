#include "ddp/data/dataset_splits.h"

#include <ATen/CPUGeneratorImpl.h>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/data/csv_reader.h"
#include "ddp/data/dataset_cache.h"
#include "ddp/data/npy_reader.h"
#include "ddp/data/synthetic_dataset.h"

namespace ddp {
namespace {

// Int labels become int64 class indices; float ones stay float (float32) and must not be NaN.
torch::Tensor checked_labels(torch::Tensor labels, const std::string& source) {
  if (labels.scalar_type() == torch::kInt || labels.scalar_type() == torch::kLong || labels.scalar_type() == torch::kUInt8)
    return labels.to(torch::kLong);
  if (labels.numel() == 0) return labels.to(torch::kFloat);  // "holds no samples" is said by the task
  auto nan = torch::isnan(labels).reshape({labels.size(0), -1}).any(1).nonzero();
  if (nan.numel() > 0)
    throw FileError(source + ": label of sample " + std::to_string(nan[0][0].item<int64_t>()) + " is NaN");
  return labels.to(torch::kFloat);
}

Dataset load_npy(const std::string& features_path, const std::string& labels_path) {
  Dataset data;
  data.feature_file = open_npy_samples(features_path);
  data.source = features_path + " (labels " + labels_path + ")";
  data.labels = checked_labels(read_npy(labels_path), labels_path);
  if (data.labels.size(0) != data.feature_file->count())
    throw FileError(features_path + " holds " + std::to_string(data.feature_file->count()) + " samples (shape [" +
                    std::to_string(data.feature_file->count()) + ", ...] " + format_shape(data.sample_shape()) +
                    " each) but " + labels_path + " holds " + std::to_string(data.labels.size(0)) + " labels");
  return data;
}

Dataset load_csv(const std::string& path, const std::string& label_column) {
  CsvTable table = read_csv(path, label_column);
  Dataset data;
  data.features = table.features;
  data.labels = table.labels;  // float64: the task decides whether they are classes
  data.source = path;
  return data;
}

// A seeded permutation of the training file: its first `fraction` becomes the eval split.
DatasetSplits carve(const Dataset& all, double fraction, int64_t seed) {
  auto eval_size = static_cast<int64_t>(static_cast<double>(all.size()) * fraction);
  if (eval_size < 1 || eval_size >= all.size())
    throw ConfigError("data.eval_fraction: " + std::to_string(fraction) + " of " + std::to_string(all.size()) +
                      " samples leaves an empty split");
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed));
  auto order = torch::randperm(all.size(), gen, torch::kLong);
  DatasetSplits splits;
  splits.eval = all.subset(order.slice(0, 0, eval_size));
  splits.train = all.subset(order.slice(0, eval_size, all.size()));
  return splits;
}

}  // namespace

DatasetSplits load_dataset_splits(const DataConfig& config, int64_t synthetic_classes) {
  DatasetSplits splits;
  bool want_eval = config.eval_split == "test";
  if (config.dataset == "synthetic") {
    // Train and eval come from one seed, so they share class prototypes.
    Dataset all = make_synthetic_dataset(config.synthetic_train_samples + config.synthetic_test_samples,
                                         synthetic_classes, static_cast<uint64_t>(config.synthetic_seed));
    splits.train = all.subset(torch::arange(config.synthetic_train_samples, torch::kLong));
    if (want_eval) splits.eval = all.subset(torch::arange(config.synthetic_train_samples, all.size(), torch::kLong));
  } else if (config.dataset == "idx") {
    std::string cache = resolve_cache_dir(config.cache_dir);
    splits.train = load_idx_split_cached(config.path, "train", cache);
    if (want_eval) splits.eval = load_idx_split_cached(config.path, "test", cache);
  } else {
    auto load = [&](const std::string& path, const std::string& labels) {
      return config.dataset == "npy" ? load_npy(path, labels) : load_csv(path, config.label_column);
    };
    Dataset train = load(config.path, config.labels);
    if (config.eval_fraction > 0) {
      splits = carve(train, config.eval_fraction, config.split_seed);
      if (!want_eval) splits.eval.reset();
    } else {
      splits.train = std::move(train);
      if (want_eval) {
        splits.eval = load(config.eval_path, config.eval_labels);
        if (splits.eval->sample_shape() != splits.train.sample_shape())
          throw FileError(config.eval_path + " holds samples of shape " + format_shape(splits.eval->sample_shape()) +
                          ", " + config.path + " of shape " + format_shape(splits.train.sample_shape()));
      }
    }
  }
  if (config.eval_split == "train") splits.eval = splits.train;
  return splits;
}

}  // namespace ddp
