#include "ddp/data/dataset_splits.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cfloat>
#include <cmath>
#include <filesystem>

#include "ddp/common/error.h"
#include "ddp/common/text.h"
#include "ddp/data/dataset_format.h"
#include "ddp/data/normalizer.h"

namespace ddp {
namespace {

// A seeded permutation of the training file: its first `fraction` becomes the eval split.
DatasetSplits carve(const Dataset& all, double fraction, int64_t seed) {
  // Rounded down, but not below what the decimal fraction means: 100 × 0.29 is 28.999999999999996.
  auto eval_size = static_cast<int64_t>(std::floor(static_cast<double>(all.size()) * fraction * (1 + 1e-12)));
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

// Non-finite features train to NaN and exit 0 (one inf under global normalisation makes every
// sample NaN): refused at load, naming the first. One pass over the file, in chunks; float64 values
// beyond float32's range count too, since training reads them as float32.
void check_finite_features(const Dataset& data, const std::string& path) {
  const auto dtype = data.feature_dtype();
  if (!c10::isFloatingType(dtype)) return;
  constexpr int64_t kChunk = 4096;
  for (int64_t start = 0; start < data.size(); start += kChunk) {
    auto rows = torch::arange(start, std::min(data.size(), start + kChunk), torch::kLong);
    auto x = data.select(rows).reshape({rows.size(0), -1});
    auto bad = torch::logical_not(torch::isfinite(x));
    if (dtype == torch::kDouble) bad.logical_or_(x.abs() > FLT_MAX);
    auto hit = bad.nonzero();
    if (hit.numel() == 0) continue;
    int64_t row = hit[0][0].item<int64_t>(), column = hit[0][1].item<int64_t>();
    double value = x[row][column].item<double>();
    std::string what = std::isnan(value) ? "NaN" : std::isinf(value) ? "infinite" : "beyond float32's range";
    throw FileError(path + ": feature " + std::to_string(column) + " of sample " + std::to_string(start + row) +
                    " is " + what + "; training needs finite features (fix or drop that sample)");
  }
}

// A missing file named by its key: the readers' "cannot open (No such file...)" left the user to
// find which setting held it.
void check_exists(const std::string& path, const std::string& key) {
  std::error_code ec;  // set where the path cannot be looked at (EACCES): the reader then says why
  if (!path.empty() && !std::filesystem::exists(path, ec) && !ec) throw FileError(key + ": no such file " + path);
}

}  // namespace

DatasetSplits load_file_splits(const DataConfig& config, const FileLoader& load, bool check_finite) {
  bool want_eval = config.eval_split == "test";
  check_exists(config.path, "data.path");
  check_exists(config.labels, "data.labels");
  Dataset train = load(config.path, config.labels);
  if (check_finite) check_finite_features(train, config.path);
  DatasetSplits splits;
  if (config.eval_fraction > 0) {
    splits = carve(train, config.eval_fraction, config.split_seed);
    if (!want_eval) splits.eval.reset();
    return splits;
  }
  splits.train = std::move(train);
  if (want_eval) {
    check_exists(config.eval_path, "data.eval_path");
    check_exists(config.eval_labels, "data.eval_labels");
    splits.eval = load(config.eval_path, config.eval_labels);
    if (check_finite) check_finite_features(*splits.eval, config.eval_path);
    if (splits.eval->sample_shape() != splits.train.sample_shape())
      throw FileError(config.eval_path + " holds samples of shape " + format_shape(splits.eval->sample_shape()) + ", " +
                      config.path + " of shape " + format_shape(splits.train.sample_shape()));
    // Targets of one shape per sample: a multi-label file beside classes failed in the loss after
    // a whole epoch (the evaluation's shape), or at the first step, in LibTorch's words.
    // A column ([N, 1], as np.save writes y.reshape(-1, 1)) is one value a sample, as [N] is: every
    // loss takes it so (cross_entropy flattens it, mse and bce reshape the output to the targets).
    auto per_sample = [](const Dataset& split) {
      auto dims = split.labels.sizes().slice(1).vec();
      return dims == std::vector<int64_t>{1} ? std::vector<int64_t>{} : dims;
    };
    if (per_sample(*splits.eval) != per_sample(splits.train)) {
      auto named = [](const std::string& labels, const std::string& features) {
        return labels.empty() ? features : labels;
      };
      auto shape = [](const std::vector<int64_t>& dims) {
        return dims.empty() ? std::string("one value") : format_shape(dims);
      };
      throw FileError(named(config.eval_labels, config.eval_path) + " holds labels of " +
                      shape(per_sample(*splits.eval)) + " a sample, " + named(config.labels, config.path) + " of " +
                      shape(per_sample(splits.train)) + ": the splits' targets must be of one shape");
    }
    // data.normalize fixed divides by 255 where the training file is uint8 (pixels 0..255): an
    // eval file of floats beside it (pixels already in [0, 1]) would be divided too, or one of
    // uint8 beside float training data not at all, and evaluated wrongly with exit 0.
    const auto train_dtype = splits.train.feature_dtype(), eval_dtype = splits.eval->feature_dtype();
    if (normalization_kind(config) == "fixed" && (train_dtype == torch::kUInt8) != (eval_dtype == torch::kUInt8))
      throw FileError(config.eval_path + " holds " + std::string(c10::toString(eval_dtype)) + " features, " + config.path +
                      " holds " + c10::toString(train_dtype) + ": data.normalize fixed divides uint8 pixels by 255 "
                      "as the training file's dtype says, so the splits would be on other scales; save both in one "
                      "dtype, or normalise by their values (data.normalize global)");
  }
  return splits;
}

DatasetSplits load_dataset_splits(const DataConfig& config, int64_t synthetic_classes) {
  const DatasetFormat& format = find_dataset_format(config.dataset);
  if (!format.load_splits)
    throw ConfigError("data.dataset: " + config.dataset + " holds no samples to split (its task reads it)");
  DatasetSplits splits = format.load_splits(config, synthetic_classes);
  if (config.eval_split == "train") splits.eval = splits.train;
  return splits;
}

}  // namespace ddp
