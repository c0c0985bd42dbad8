#include "ddp/data/data_config.h"

#include <spdlog/fmt/fmt.h>

#include <filesystem>
#include <limits>

#include "ddp/config/config_schema.h"

namespace ddp {

void declare_config(ConfigSchema& schema, DataConfig& config) {
  schema.section("data", "Where samples come from and how they are normalised.");
  schema.add("data.dataset", &config.dataset,
             "idx: MNIST-format IDX files under `path`; synthetic: generated samples; npy: NumPy arrays "
             "(`path` features, `labels` labels); csv: a table with a header row (`path`, `label_column`); criteo: click logs in Criteo's "
             "tab-separated layout (model.name dlrm, train.loss bce_with_logits; docs/click-through.md); graph: a "
             "graph directory (train.task: node_classification)")
      .choices(dataset_format_names());
  schema.add("data.path", &config.path,
             "idx: directory with the train-/t10k- IDX files (raw or .gz); npy: the training features (.npy, "
             "first dimension = samples); csv: the training table; criteo: the training click log; graph: a graph directory (docs/graphs.md); tokens: a token file or a glob of shards, read in their "
             "sorted order (docs/language-models.md)")
      .file_path();
  schema.add("data.labels", &config.labels, "npy: the training labels (.npy): int64/int32 classes or float32 targets")
      .file_path();
  schema.add("data.eval_path", &config.eval_path,
             "npy, csv, criteo: the test split's features, table or click log; tokens: the held-out token file or glob")
      .file_path();
  schema.add("data.token_dtype", &config.token_dtype,
             "tokens: the token type of headerless files (nanoGPT's train.bin/val.bin); empty for llm.c shards and "
             ".npy, whose headers say it");
  schema.add("data.eval_labels", &config.eval_labels, "npy: the test split's labels (.npy)").file_path();
  schema.add("data.eval_fraction", &config.eval_fraction,
             "npy, csv, criteo: without eval_path, this share of `path` becomes the test split (a seeded random split)")
      .min(0)
      .less_than(1);
  schema.add("data.split_seed", &config.split_seed, "seed of the eval_fraction split");
  schema.add("data.label_column", &config.label_column, "csv: header name of the label column").non_empty();
  schema.add("data.normalize", &config.normalize,
             "fixed: (x - mean) / std with x = pixel/255 for uint8; global: one mean/std over the training "
             "features; per_feature: a mean/std per feature position; none: as stored; auto: fixed for "
             "idx/synthetic, global for npy/csv; criteo's features are always as read")
      .choices({"auto", "fixed", "global", "per_feature", "none"});
  schema.add("data.mean", &config.mean, "fixed normalisation: (x - mean) / std")
      .min(-1e12)
      .max(1e12);
  schema.add("data.std", &config.std, "fixed normalisation divisor").greater_than(0)
      .max(1e12);
  // The features are divided by it in float32, where a double as small as 1e-300 is 0: every
  // input would be inf or nan.
  schema.rule("data.std", [&config]() -> std::string {
    return config.std > 0 && static_cast<float>(config.std) < std::numeric_limits<float>::min()
               ? "expected at least 1.2e-38, float32's smallest normal number: the features are divided by it in "
                 "float32, where a smaller one is 0 or has lost its precision"
               : "";
  });
  schema.add("data.eval_split", &config.eval_split, "split that `eval:` runs on (val: graphs only); none: no evaluation")
      .choices({"test", "train", "val", "none"});
  schema.add("data.synthetic_train_samples", &config.synthetic_train_samples, "synthetic: training samples").min(1)
      .max(1e7);
  schema.add("data.synthetic_test_samples", &config.synthetic_test_samples, "synthetic: test samples").min(1)
      .max(1e7);
  schema.add("data.synthetic_seed", &config.synthetic_seed,
             "synthetic: seed of the samples (train and test come from it together, sharing class prototypes)");
  schema.add("data.cache_dir", &config.cache_dir,
             "where IDX files, graphs and Criteo click logs are kept decoded, read on demand and shared by every "
             "worker of a node; "
             "empty: $XDG_CACHE_HOME/ddprun (or ~/.cache/ddprun); none: decode into each worker's memory")
      .file_path({"none"});
  schema.add("data.workers", &config.workers, "background threads assembling batches").min(1)
      .max(256);
  schema.add("data.prefetch", &config.prefetch, "batches assembled ahead of the step").min(1)
      .max(1024);
  schema.rule("data.path", [&config]() -> std::string {
    return config.dataset != "synthetic" && config.path.empty() ? "must not be empty when data.dataset is " + config.dataset : "";
  });
  schema.rule("data.eval_split", [&config]() -> std::string {
    return config.eval_split == "val" && config.dataset != "graph" ? "val is a graph's split (data.dataset: graph)" : "";
  });
  schema.rule("data.normalize", [&config]() -> std::string {
    return config.dataset == "criteo" && config.normalize != "auto" && config.normalize != "none"
               ? "criteo: the counts are log-scaled and the hashes must stay whole, so the features are used as read "
                 "(leave data.normalize out)"
               : "";
  });
  schema.rule("data.labels", [&config]() -> std::string {
    if (config.dataset == "npy" && config.labels.empty()) return "must name the labels .npy when data.dataset is npy";
    // Else read nowhere: a labels file the user meant went unused without a word.
    if (config.dataset != "npy" && !config.labels.empty())
      return "only data.dataset npy reads a labels file, and data.dataset is " + config.dataset + ": leave it out";
    return "";
  });
  schema.rule("data.eval_path", [&config]() -> std::string {
    bool files = config.dataset == "npy" || config.dataset == "csv" || config.dataset == "criteo";
    if (config.dataset == "tokens" && config.eval_split == "test" && config.eval_path.empty())
      return "must name the held-out token file or glob (or set data.eval_split: none)";
    if (!files) return "";
    if (!config.eval_path.empty() && config.eval_fraction > 0) return "set it or data.eval_fraction, not both";
    if (config.eval_split == "test" && config.eval_path.empty() && config.eval_fraction == 0)
      return "must name the test split (or set data.eval_fraction, or data.eval_split: none)";
    return "";
  });
  schema.rule("data.token_dtype", [&config]() -> std::string {
    const std::string& t = config.token_dtype;
    return t.empty() || t == "uint16" || t == "uint32" ? "" : "must be uint16 or uint32 (or empty), got \"" + t + "\"";
  });
  schema.rule("data.eval_fraction", [&config]() -> std::string {
    return config.dataset == "tokens" && config.eval_fraction > 0 ? "tokens: name the held-out shards in data.eval_path" : "";
  });
  // Notices, not errors, as for the pipeline's keys: set for another dataset, read by none here.
  schema.notice("data.eval_path", [&config]() -> std::string {
    const bool read = config.dataset == "npy" || config.dataset == "csv" || config.dataset == "criteo" ||
                      config.dataset == "tokens";
    return !read && !config.eval_path.empty()
               ? "does nothing with data.dataset " + config.dataset + " (npy, csv, criteo and tokens read it)"
               : "";
  });
  schema.notice("data.eval_fraction", [&config]() -> std::string {
    const bool read = config.dataset == "npy" || config.dataset == "csv" || config.dataset == "criteo";
    return !read && config.dataset != "tokens" && config.eval_fraction > 0
               ? "does nothing with data.dataset " + config.dataset + " (npy, csv and criteo split by it)"
               : "";
  });
  // The fixed normalisation's numbers, given where another one (or none) is made: the user's mean
  // and std went unread.
  const DataConfig defaults;
  for (auto [key, changed] : {std::pair{"data.mean", &config.mean}, std::pair{"data.std", &config.std}})
    schema.notice(
        key, [&config, changed, default_value = key == std::string("data.mean") ? defaults.mean : defaults.std]() {
          if (*changed == default_value) return std::string();
          if (config.dataset == "tokens" || config.dataset == "graph" || config.dataset == "criteo")
            return "does nothing with data.dataset " + config.dataset + ", which is not normalised";
          const std::string kind = normalization_kind(config);
          return kind == "fixed"
                     ? std::string()
                     : "does nothing with data.normalize " + config.normalize +
                           (config.normalize == "auto" ? " (" + kind + " for data.dataset " + config.dataset + ")"
                                                       : std::string()) +
                           ": set data.normalize fixed to normalise by data.mean and data.std";
        });
  // The carve does not depend on whether an evaluation reads it: the training split stays the
  // same when evaluation is turned off (runs compared, a resume). Said, as its samples go unused.
  schema.notice("data.eval_fraction", [&config]() -> std::string {
    const bool read = config.dataset == "npy" || config.dataset == "csv" || config.dataset == "criteo";
    return read && config.eval_fraction > 0 && config.eval_split != "test"
               ? "holds out " + fmt::format("{:.3g}", config.eval_fraction * 100) +
                     "% of data.path's samples, which data.eval_split " + config.eval_split +
                     " never evaluates: they are not trained on either (the training split stays the same whether "
                     "or not it is evaluated); set data.eval_fraction 0 to train on every sample"
               : "";
  });
  schema.rule("data.eval_labels", [&config]() -> std::string {
    if (config.dataset == "npy" && !config.eval_path.empty() && config.eval_labels.empty())
      return "must name the labels .npy of data.eval_path";
    // Else the evaluation took data.eval_fraction's split with its own labels, and these went unread.
    if (config.dataset == "npy" && config.eval_path.empty() && !config.eval_labels.empty())
      return "labels data.eval_path's samples, and data.eval_path is not set: set it too, or leave this out "
             "(the eval split is then data.eval_fraction of data.path)";
    if (config.dataset != "npy" && !config.eval_labels.empty())
      return "only data.dataset npy reads a labels file, and data.dataset is " + config.dataset + ": leave it out";
    return "";
  });
}

void declare_config(ConfigSchema& schema, SamplerConfig& config) {
  schema.section("sampler", "DistributedSampler's arguments: how the samples are shared among ranks.");
  schema.add("sampler.shuffle", &config.shuffle, "a new sample order each epoch");
  schema.add("sampler.seed", &config.seed, "seed of the shuffle (the same on every rank)");
  schema.add("sampler.fanouts", &config.fanouts,
             "graph: neighbours sampled per node at each hop from the seed nodes (PyG's num_neighbors); -1: all")
      .min(-1)
      .max(1e6);
  schema.add("sampler.drop_last", &config.drop_last,
             "drop the samples that do not divide evenly among ranks, rather than repeat some to fill up");
  schema.add("sampler.split", &config.split,
             "distributed: DistributedSampler's strided shares of one shuffle; chunk: rank r trains on the r-th of "
             "world equal contiguous chunks (PyG's train_idx.split(n // world)[r], the remainder dropped), shuffled "
             "within it")
      .choices({"distributed", "chunk"});
}

std::string normalization_kind(const DataConfig& config) {
  if (config.dataset == "criteo") return "as_stored";  // already as DLRM takes them; a hash must not be rounded
  if (config.normalize != "auto") return config.normalize;
  return config.dataset == "idx" || config.dataset == "synthetic" ? "fixed" : "global";
}

std::string tokenizer_beside(const std::string& data_path) {
  return (std::filesystem::path(data_path).parent_path() / "tokenizer.model").string();
}

}  // namespace ddp
