#pragma once

#include <cstdint>

namespace ddp {

/// Where the loop stands; with the sampler's seed this pins down every sample still to come.
struct TrainProgress {
  int64_t step = 0;            ///< optimizer steps done
  int64_t epoch = 0;           ///< current epoch (0-based)
  int64_t batch_in_epoch = 0;  ///< micro-batches of `epoch` already consumed
  /// Samples per rank in each of them (train.batch_size): batch_in_epoch counts in these, so a
  /// resumed run must use the same. 0 in checkpoints written before it was recorded.
  int64_t batch_size = 0;
  /// The ranks that consumed them (each batch_in_epoch is that many batches of the dataset): a run
  /// may resume at another world size when world_size × batch_size stays the same. 0: unknown.
  int64_t world_size = 0;
};

}  // namespace ddp
