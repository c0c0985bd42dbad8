#pragma once

#include <cstdint>
#include <string>

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
  /// Micro-steps in each optimizer step (train.grad_accum_steps, or dist.microbatches under a
  /// pipeline): world_size × batch_size × accum_steps samples make a step. 0: unknown (older checkpoints).
  int64_t accum_steps = 0;
  /// The learning rate of the last step done: a resume says when its schedule gives the next step
  /// a higher one. Negative: unknown (no step yet, or a checkpoint from before it was recorded).
  double lr = -1;
  /// The ranks optim.lr_scaling scaled the rate by (batch_ranks: a pipeline's stages each, a tensor
  /// group once). 0: unknown (older checkpoints, which scaled by world_size).
  int64_t lr_ranks = 0;
  /// The evaluation due at `step` was cut short by a stop: a resume runs it before the next step.
  bool eval_pending = false;
};

// Note [Epoch numbering]: epochs count from 1 wherever they are read (log lines, the progress line,
// evaluations, the resume line, metrics.jsonl), and a record belongs to the epoch it was made in: a
// step of the first epoch is in epoch 1, the evaluation at its end is after epoch 1, and the one
// before any step is before training (epoch 0 in metrics.jsonl). TrainProgress::epoch itself stays
// the count of finished epochs, as checkpoints hold it.

/// The epoch a record made now belongs to.
inline int64_t epoch_of(const TrainProgress& progress) {
  return progress.batch_in_epoch == 0 ? progress.epoch : progress.epoch + 1;
}

/// "in epoch 2", "after epoch 1" or "before training".
inline std::string epoch_text(const TrainProgress& progress) {
  if (progress.batch_in_epoch > 0) return "in epoch " + std::to_string(progress.epoch + 1);
  return progress.epoch == 0 ? "before training" : "after epoch " + std::to_string(progress.epoch);
}

}  // namespace ddp
