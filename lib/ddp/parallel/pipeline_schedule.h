#pragma once
// The order in which one pipeline stage runs the forwards and backwards of a step's microbatches
// (Note [Pipeline schedules] in pipeline_schedule.cpp).

#include <string>
#include <vector>

namespace ddp {

/// One thing a stage does: a microbatch's forward or its backward.
struct PipelineAction {
  enum Kind { kForward, kBackward } kind = kForward;
  int microbatch = 0;
  bool operator==(const PipelineAction&) const = default;
};

/// Stage `stage` of `stages`' actions for `microbatches` microbatches under `schedule` ("gpipe" or
/// "1f1b"): each microbatch's forward once, then its backward once.
std::vector<PipelineAction> pipeline_schedule(const std::string& schedule, int stages, int stage, int microbatches);

/// Microbatches whose forward ran and whose backward has not, at most, over `actions`: how many sets
/// of activations the stage holds at once.
int peak_in_flight(const std::vector<PipelineAction>& actions);

/// The idle share of a step the schedule implies for equal forward and backward times: (P-1)/(M+P-1).
double ideal_bubble_fraction(int stages, int microbatches);

}  // namespace ddp
