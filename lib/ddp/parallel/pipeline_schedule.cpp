#include "ddp/parallel/pipeline_schedule.h"

#include <algorithm>
#include <stdexcept>

namespace ddp {

// Note [Pipeline schedules]
// GPipe runs every microbatch's forward, then every backward in the same order (as PyTorch's
// ScheduleGPipe; each parameter's gradient then sums the microbatches in the order one process
// accumulating them would), so a stage holds the activations of all M microbatches at once. 1F1B (PipeDream-Flush, Megatron's
// default) lets stage s run P-1-s forwards ahead ("warm-up"), then alternates one forward with one
// backward, then finishes the backwards: at most P-s microbatches are in flight on stage s, whatever
// M is, and the idle time is GPipe's, (P-1)/(M+P-1) of a step. Both send activations forward and
// gradients back in the same order on both sides of each link, so blocking receives cannot deadlock
// while sends do not block (the exchange keeps them in flight).
std::vector<PipelineAction> pipeline_schedule(const std::string& schedule, int stages, int stage, int microbatches) {
  using A = PipelineAction;
  std::vector<A> actions;
  if (schedule == "gpipe") {
    for (int m = 0; m < microbatches; ++m) actions.push_back({A::kForward, m});
    for (int m = 0; m < microbatches; ++m) actions.push_back({A::kBackward, m});
    return actions;
  }
  if (schedule != "1f1b") throw std::invalid_argument("unknown pipeline schedule " + schedule);
  int warmup = std::min(stages - 1 - stage, microbatches);
  int forward = 0, backward = 0;
  for (; forward < warmup; ++forward) actions.push_back({A::kForward, forward});
  for (; forward < microbatches; ++forward, ++backward) {
    actions.push_back({A::kForward, forward});
    actions.push_back({A::kBackward, backward});
  }
  for (; backward < microbatches; ++backward) actions.push_back({A::kBackward, backward});
  return actions;
}

int peak_in_flight(const std::vector<PipelineAction>& actions) {
  int now = 0, peak = 0;
  for (const auto& action : actions) {
    now += action.kind == PipelineAction::kForward ? 1 : -1;
    peak = std::max(peak, now);
  }
  return peak;
}

double ideal_bubble_fraction(int stages, int microbatches) {
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

}  // namespace ddp
