#pragma once
// Evaluation over the eval split (or eval.max_batches' evenly spread share of it), sharded across
// ranks without padding, so the numbers are the same for any world size.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/comm/process_group.h"
#include "ddp/loop/loop_config.h"
#include "ddp/loop/pipeline_runner.h"
#include "ddp/task/task.h"

namespace ddp {

/// The task's metrics, each a mean over the samples evaluated.
struct EvalResult {
  std::vector<std::pair<std::string, double>> metrics;  ///< in the task's order
  int64_t samples = 0;  ///< evaluated, over every rank
  int64_t planned = 0;  ///< to be evaluated: the eval split, or eval.max_batches' share of it
  /// Whether a stop request cut it short on some rank (every rank sees the same): the metrics are
  /// over `samples` of `planned`.
  bool interrupted = false;
};

/// What an evaluation tells its caller as it goes, and asks it.
struct EvalHooks {
  /// After each of this rank's batches: how many it has done, of how many it has.
  std::function<void(int64_t done, int64_t total)> batch_done;
  /// Whether to stop before this rank's next batch (a signal asked the run to stop); what was
  /// measured is still summed over the ranks. Unset: never.
  std::function<bool()> stop_requested;
};

/// Runs the task's model in eval mode over this rank's shard, eval.batch_size samples at a time,
/// and all-reduces the sums. `lockstep`: the model's forward communicates over `comm` (sharded
/// tables, parameters gathered block by block), so every rank runs as many forwards as the rank with
/// the most batches (past its share, one sample's, uncounted), and a stop request stops them all
/// before the same batch.
EvalResult evaluate(Task& task, const EvalConfig& config, const Communicator& comm, const EvalHooks& hooks = {},
                    bool lockstep = false);

/// The same through pipeline stages: `stage` is this rank's; the samples are split over `replicas`
/// (this stage's), and the last stages' sums are added up over `world`, from the ranks that
/// `counts_samples` (one of each tensor group). It is not cut short by hooks.stop_requested: the
/// stages exchange every batch, so they could stop only together.
EvalResult evaluate_pipelined(Task& task, const EvalConfig& config, PipelineRunner& stage, const Communicator& replicas,
                              const Communicator& world, const EvalHooks& hooks = {}, bool counts_samples = true);

}  // namespace ddp
