#pragma once
// The collectives a step begins on each process group, counted for the log (ParallelPlan::
// collectives_started), by the step runner that the loop calls once a step.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/record/metrics_log.h"

namespace ddp {

class CollectiveCounter {
 public:
  using Started = std::function<std::vector<std::pair<std::string, int64_t>>()>;
  /// `started`: the collectives this rank has begun so far, by group name.
  explicit CollectiveCounter(Started started) : started_(std::move(started)) {}

  /// At the start of each step: the steps between the first and the last are counted whole
  /// (the evaluations and checkpoints between them included).
  void step_begins();
  /// Rank 0 (`log`): "collectives a step on rank 0, by process group: world=tensor 43.0" logged, and
  /// collectives_per_step_<group> added to `record`. Nothing before two steps began.
  void report(bool log, MetricsRecord& record) const;

 private:
  Started started_;
  std::vector<std::pair<std::string, int64_t>> first_, last_;
  int64_t steps_ = -1;  // counted between first_ and last_
};

}  // namespace ddp
