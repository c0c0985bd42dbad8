#pragma once

#include <cstdint>

namespace ddp {

/// Where the loop stands; with the sampler's seed this pins down every sample still to come.
struct TrainProgress {
  int64_t step = 0;            ///< optimizer steps done
  int64_t epoch = 0;           ///< current epoch (0-based)
  int64_t batch_in_epoch = 0;  ///< micro-batches of `epoch` already consumed
};

}  // namespace ddp
