#pragma once
// The samples of one optimizer step, and how the ranks form them. See Note [Global batch].

#include <cstdint>
#include <string>

namespace ddp {

struct TrainConfig;

/// How a run makes each optimizer step of samples.
struct StepShape {
  int64_t replicas = 1;     ///< the ranks (or pipeline replicas) that split the samples
  int64_t batch_size = 1;   ///< samples per replica and micro-step (a pipeline's microbatch)
  int64_t accum_steps = 1;  ///< micro-steps per optimizer step (dist.microbatches under a pipeline)
  bool microbatched = false;      ///< accum_steps is a pipeline's dist.microbatches, not train.grad_accum_steps
  int64_t given_accum_steps = 1;  ///< train.grad_accum_steps as the config gives it, for advice that must keep it
  int64_t lr_ranks = 1;           ///< the ranks optim.lr_scaling scales by (batch_ranks)

  int64_t samples() const { return replicas * batch_size * accum_steps; }
};

/// One rank's share of a step's global batch.
struct GlobalBatchShare {
  int64_t batch_size = 0;        ///< per replica, per micro-step (a pipeline's microbatch)
  int64_t grad_accum_steps = 0;  ///< micro-steps per optimizer step (a pipeline's microbatches)
  std::string formation;         ///< "global batch G = ...": how, said once at start
  bool microbatched = false;     ///< a pipeline's: grad_accum_steps counts its dist.microbatches
};

/// The split of `global_batch` over `world` ranks with micro-batches of at most `max_batch`: the
/// fewest micro-steps whose equal micro-batches fill the rank's share exactly. Throws UserError,
/// naming the world sizes that would work, when `world` does not divide `global_batch`.
GlobalBatchShare share_global_batch(int64_t global_batch, int world, int64_t max_batch, int tensor = 1);

/// A pipeline's split of `global_batch` over `replicas` replicas of `stages` stages, each replica's
/// share cut into `microbatches`; 0 chooses twice the stages (else the stages) when that divides the
/// share, or more where microbatches would exceed `max_batch`. Throws UserError naming `key`
/// (train.global_batch_size, or dist.microbatches when the global batch was not given) when it
/// does not split evenly.
GlobalBatchShare share_pipeline_batch(int64_t global_batch, int replicas, int stages, int64_t microbatches,
                                      int64_t max_batch, const std::string& key = "train.global_batch_size");

/// The ranks a step's batch counts at world size `world`: every rank, a tensor group of
/// dist.tensor ranks as one (it trains one batch); pipeline stages each count, since a replica of
/// S stages trains S × train.batch_size samples a step. optim.lr_scaling scales by this, so that
/// the same samples a step get the same rate whatever the layout.
int batch_ranks(const TrainConfig& config, int world);

/// The step of `config` at world size `world`, whatever its layout: train.global_batch_size when
/// set, else world × train.batch_size × train.grad_accum_steps, formed by world / dist.pipeline
/// replicas (a pipeline cuts each replica's share into dist.microbatches). A tensor group of
/// dist.tensor ranks counts as one rank: it trains one batch.
GlobalBatchShare share_step(const TrainConfig& config, int world);

}  // namespace ddp
