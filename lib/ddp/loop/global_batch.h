#pragma once
// train.global_batch_size: the samples of one optimizer step, whatever the world size. See Note [Global batch].

#include <cstdint>
#include <string>

namespace ddp {

/// One world size's share of a global batch.
struct GlobalBatchShare {
  int64_t batch_size = 0;        ///< per rank, per micro-step
  int64_t grad_accum_steps = 0;  ///< micro-steps per optimizer step
};

/// The split of `global_batch` over `world` ranks with micro-batches of at most `max_batch`: the
/// fewest micro-steps whose equal micro-batches fill the rank's share exactly. Throws UserError,
/// naming the world sizes that would work, when `world` does not divide `global_batch`.
GlobalBatchShare share_global_batch(int64_t global_batch, int world, int64_t max_batch);

/// The same where the plan fixes the micro-batches a step (a pipeline's `microbatches`): a global
/// batch splits into `replicas` × `microbatches` micro-batches, or without one each is `batch`.
/// Throws UserError when it does not split, ConfigError for train.grad_accum_steps (`accum`) other than 1.
GlobalBatchShare share_fixed_microbatches(int64_t global_batch, int replicas, int64_t microbatches, int64_t batch,
                                          int64_t accum);

}  // namespace ddp
