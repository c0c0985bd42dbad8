#pragma once
// The seam between the loop and how this rank computes a step: the whole model's forwards and
// backwards (PlainStep), or its pipeline stage's in the schedule's order (PipelineStep). The loop
// calls it alike whatever the parallelism; parallelize() chooses it.

#include <torch/torch.h>

#include <cstdint>
#include <functional>

#include "ddp/data/batch.h"
#include "ddp/loop/evaluator.h"
#include "ddp/loop/loop_config.h"
#include "ddp/loop/run_recorder.h"
#include "ddp/record/metrics_log.h"

namespace ddp {

/// What the loop supplies to a step.
struct StepHooks {
  std::function<Batch()> next_batch;            ///< the next micro-batch, on this rank's device
  std::function<void()> before_last_backward;   ///< the stop vote and the gradient sync's prepare
  std::function<void(int)> after_microbatch;    ///< a heartbeat after this rank's part of one
  /// The samples of this rank's micro-batches in all: an epoch's short last step has a short last
  /// micro-batch (Note [Micro-batches of unequal size]). 0: every micro-batch is as large.
  int64_t step_samples = 0;
};

// Note [Micro-batches of unequal size]: a step's gradient is the mean over its samples, as one
// batch of them all would give. Each micro-batch's loss is its samples' mean, so it counts as its
// share of the step's samples: loss / (step samples / its samples). For equal micro-batches that is
// loss / micro-batches, bit for bit; the short last one of an epoch's last step counts for less (a
// plain loss / micro-batches made its few samples count as much as a whole micro-batch's).

/// What one step's forwards and backwards did on this rank.
struct StepWork {
  StepStats stats;         ///< micro-batches, samples, tokens and edges it speaks for (not the loss)
  /// The micro-batches' losses times their samples, summed (the step's samples' losses), float64,
  /// where they lie: read once the optimizer's step is queued (reading it earlier would keep a GPU
  /// idle). Undefined where this rank computes no loss.
  torch::Tensor loss_sum;
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  /// Forwards and backwards of `micro_batches` micro-batches, the gradients accumulated as their
  /// mean's, as one batch that many times as large would give.
  virtual StepWork train(int64_t micro_batches, const StepHooks& hooks) = 0;
  /// The task's metrics over the eval split, its samples split over the data-parallel group.
  virtual EvalResult evaluate(const EvalConfig& config, const EvalHooks& hooks) = 0;
  /// After training: what it measured, logged, and as a metrics record on rank 0 (empty elsewhere,
  /// and where there is nothing to say). Every rank calls it.
  virtual MetricsRecord report() { return {}; }
};

}  // namespace ddp
