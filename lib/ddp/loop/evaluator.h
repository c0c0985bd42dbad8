#pragma once
// Evaluation over the whole eval split, sharded across ranks without padding, so the numbers
// are the same for any world size.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ddp/comm/process_group.h"
#include "ddp/loop/loop_config.h"
#include "ddp/loop/pipeline_runner.h"
#include "ddp/task/task.h"

namespace ddp {

/// The task's metrics, each a mean over every sample of the eval split.
struct EvalResult {
  std::vector<std::pair<std::string, double>> metrics;  ///< in the task's order
  int64_t samples = 0;
};

/// Runs the task's model in eval mode over this rank's shard, eval.batch_size samples at a time,
/// and all-reduces the sums.
EvalResult evaluate(Task& task, const EvalConfig& config, const Communicator& comm);

/// The same through pipeline stages: `stage` is this rank's; the samples are split over `replicas`
/// (this stage's), and the last stages' sums are added up over `world`.
EvalResult evaluate_pipelined(Task& task, const EvalConfig& config, PipelineRunner& stage, const Communicator& replicas,
                              const Communicator& world);

}  // namespace ddp
