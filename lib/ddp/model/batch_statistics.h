#pragma once
// Which layers of a model normalise by the statistics of the batch they are given (BatchNorm): such
// a model trains otherwise when the same samples are grouped into other micro-batches, which a
// resume at another layout must say.

#include <torch/nn/module.h>

#include <string>

namespace ddp {

/// The batch-statistics layers of a model.
struct BatchStatistics {
  std::string first_layer;  ///< the first such layer's name ("" when the model has none)
  bool all_synced = true;   ///< every one is a SyncBatchNorm: its statistics are the replicas' together
  bool any() const { return !first_layer.empty(); }
};

/// A built-in model's BatchNorm and SyncBatchNorm layers, and a TorchScript model's torch.nn
/// BatchNorm{1,2,3}d and SyncBatchNorm (its mirrors carry the class name), with running statistics or
/// without, and any other module with a running_mean buffer (a subclass of them); InstanceNorm,
/// LayerNorm and GroupNorm normalise each sample alone and are not counted.
BatchStatistics batch_statistics_of(const torch::nn::Module& model);

}  // namespace ddp
