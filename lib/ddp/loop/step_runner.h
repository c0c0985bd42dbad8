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
};

/// What one step's forwards and backwards did on this rank.
struct StepWork {
  StepStats stats;         ///< micro-batches, samples, tokens and edges it speaks for (not the loss)
  /// The losses summed, float64, where they lie: read once the optimizer's step is queued (reading
  /// it earlier would keep a GPU idle). Undefined where this rank computes no loss.
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
