#pragma once
// torch.utils.data.distributed.DistributedSampler (PyTorch 1.13), index for index.

#include "ddp/data/data_config.h"

#include <torch/types.h>

#include <cstdint>

namespace ddp {

/// Splits [0, dataset_size) into `num_replicas` equal shards, one per rank, reshuffled each epoch
/// from seed + epoch. Without drop_last the shards are padded by repeating the first indices, so
/// every rank runs the same number of steps (a rank that ran fewer would hang the all-reduce).
/// With split "chunk", rank r takes the r-th of num_replicas contiguous chunks of N / num_replicas
/// (PyG's `train_idx.split(N // world)[rank]`), shuffled within itself each epoch.
class DistributedSampler {
 public:
  /// Throws std::invalid_argument unless dataset_size >= 1, num_replicas >= 1, 0 <= rank < num_replicas.
  DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, const SamplerConfig& config);

  /// Selects the order for `epoch`; call at the start of every epoch, as in PyTorch.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  /// The epoch whose order indices() returns.
  int64_t epoch() const { return epoch_; }

  /// This rank's indices for the current epoch: int64 [num_samples()].
  torch::Tensor indices() const;

  /// Indices per rank per epoch.
  int64_t num_samples() const { return num_samples_; }
  /// num_samples() * num_replicas: the padded (or trimmed) length of one epoch over all ranks.
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t dataset_size_;
  int64_t num_replicas_;
  int64_t rank_;
  SamplerConfig config_;
  int64_t epoch_ = 0;
  int64_t num_samples_ = 0;
};

}  // namespace ddp
