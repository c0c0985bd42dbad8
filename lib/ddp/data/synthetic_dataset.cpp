#include "ddp/data/synthetic_dataset.h"

#include <ATen/CPUGeneratorImpl.h>

#include <stdexcept>
#include <string>

#include "ddp/data/dataset_format.h"

namespace ddp {
namespace {

constexpr int64_t kSide = 28;
constexpr int64_t kBlock = 4;  // prototypes are 7x7 blocks of 4x4 pixels: coarse, like real shapes
constexpr double kContrast = 200.0;
constexpr double kFloor = 25.0;
constexpr double kNoise = 30.0;  // enough that no single pixel gives the class away

}  // namespace

Dataset make_synthetic_dataset(int64_t samples, int64_t num_classes, uint64_t seed) {
  if (samples < 0) {
    throw std::invalid_argument("make_synthetic_dataset: samples must be >= 0, got " + std::to_string(samples));
  }
  if (num_classes < 1) {
    throw std::invalid_argument("make_synthetic_dataset: num_classes must be >= 1, got " + std::to_string(num_classes));
  }
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t coarse = kSide / kBlock;
  torch::Tensor prototypes = torch::rand({num_classes, coarse, coarse}, gen, torch::kFloat)
                                 .repeat_interleave(kBlock, 1)
                                 .repeat_interleave(kBlock, 2);

  // Balanced: class i % num_classes, in a seeded random order.
  torch::Tensor labels = torch::arange(samples, torch::kLong).remainder(num_classes);
  labels = labels.index_select(0, torch::randperm(samples, gen, torch::kLong));

  torch::Tensor noise = torch::randn({samples, kSide, kSide}, gen, torch::kFloat);
  torch::Tensor images = prototypes.index_select(0, labels).mul_(kContrast).add_(kFloor).add_(noise.mul_(kNoise));

  Dataset data;
  data.features = images.round_().clamp_(0, 255).to(torch::kUInt8).unsqueeze(1);
  data.labels = labels;
  data.source = "synthetic(samples=" + std::to_string(samples) + ", classes=" + std::to_string(num_classes) +
                ", seed=" + std::to_string(seed) + ")";
  return data;
}

void register_synthetic_format(DatasetFormats& formats) {
  formats.add("synthetic").load_splits = [](const DataConfig& config, int64_t classes) {
    // Train and eval come from one seed, so they share class prototypes.
    Dataset all = make_synthetic_dataset(config.synthetic_train_samples + config.synthetic_test_samples, classes,
                                         static_cast<uint64_t>(config.synthetic_seed));
    DatasetSplits splits;
    splits.train = all.subset(torch::arange(config.synthetic_train_samples, torch::kLong));
    if (config.eval_split == "test")
      splits.eval = all.subset(torch::arange(config.synthetic_train_samples, all.size(), torch::kLong));
    return splits;
  };
}

}  // namespace ddp
