#include "ddp/data/data_config.h"

#include "ddp/config/config_schema.h"

namespace ddp {

void declare_config(ConfigSchema& schema, DataConfig& config) {
  schema.section("data", "Where samples come from and how they are normalised.");
  schema.add("data.dataset", &config.dataset, "idx: MNIST-format IDX files under `path`; synthetic: generated samples")
      .choices({"idx", "synthetic"});
  schema.add("data.path", &config.path, "directory with the train-/t10k- IDX files (raw or .gz)");
  schema.add("data.mean", &config.mean, "normalisation: (pixel/255 - mean) / std");
  schema.add("data.std", &config.std, "normalisation divisor").greater_than(0);
  schema.add("data.eval_split", &config.eval_split, "split that `eval:` runs on; none: no evaluation")
      .choices({"test", "train", "none"});
  schema.add("data.synthetic_train_samples", &config.synthetic_train_samples, "synthetic: training samples").min(1);
  schema.add("data.synthetic_test_samples", &config.synthetic_test_samples, "synthetic: test samples").min(1);
  schema.add("data.synthetic_seed", &config.synthetic_seed,
             "synthetic: seed of the samples (train and test come from it together, sharing class prototypes)");
  schema.add("data.cache_dir", &config.cache_dir,
             "where IDX files are kept decoded, read on demand and shared by every worker of a node; "
             "empty: $XDG_CACHE_HOME/ddprun (or ~/.cache/ddprun); none: decode into each worker's memory");
  schema.add("data.workers", &config.workers, "background threads assembling batches").min(1);
  schema.add("data.prefetch", &config.prefetch, "batches assembled ahead of the step").min(1);
  schema.rule("data.path", [&config]() -> std::string {
    return config.dataset == "idx" && config.path.empty() ? "must not be empty when data.dataset is idx" : "";
  });
}

void declare_config(ConfigSchema& schema, SamplerConfig& config) {
  schema.section("sampler", "DistributedSampler's arguments: how the samples are shared among ranks.");
  schema.add("sampler.shuffle", &config.shuffle, "a new sample order each epoch");
  schema.add("sampler.seed", &config.seed, "seed of the shuffle (the same on every rank)");
  schema.add("sampler.drop_last", &config.drop_last,
             "drop the samples that do not divide evenly among ranks, rather than repeat some to fill up");
}

}  // namespace ddp
