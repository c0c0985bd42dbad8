#pragma once
// The samples of one optimizer step, and how the ranks form them. See Note [Global batch].

#include <cstdint>
#include <string>

namespace ddp {

/// One rank's share of a step's global batch.
struct GlobalBatchShare {
  int64_t batch_size = 0;        ///< per replica, per micro-step (a pipeline's microbatch)
  int64_t grad_accum_steps = 0;  ///< micro-steps per optimizer step (a pipeline's microbatches)
  std::string formation;         ///< "global batch G = ...": how, said once at start
};

/// The split of `global_batch` over `world` ranks with micro-batches of at most `max_batch`: the
/// fewest micro-steps whose equal micro-batches fill the rank's share exactly. Throws UserError,
/// naming the world sizes that would work, when `world` does not divide `global_batch`.
GlobalBatchShare share_global_batch(int64_t global_batch, int world, int64_t max_batch);

/// A pipeline's split of `global_batch` over `replicas` replicas of `stages` stages, each replica's
/// share cut into `microbatches` (0: twice the stages, else the stages, whichever divides it).
/// Throws UserError naming `key` (train.global_batch_size, or dist.microbatches when the global
/// batch was not given) when it does not split evenly.
GlobalBatchShare share_pipeline_batch(int64_t global_batch, int replicas, int stages, int64_t microbatches,
                                      const std::string& key = "train.global_batch_size");

/// The step of a run with these keys, whatever its layout: train.global_batch_size when set (> 0),
/// else `world` ranks × train.batch_size `batch` × train.grad_accum_steps `accum`, formed by
/// `world / stages` replicas (stages > 1: a pipeline, which cuts each replica's share into
/// dist.microbatches `microbatches`).
GlobalBatchShare share_step(int64_t global_batch, int64_t batch, int64_t accum, int world, int stages,
                            int64_t microbatches);

}  // namespace ddp
