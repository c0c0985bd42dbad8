#pragma once
// Learning rate as a pure function of the optimizer step, so a resumed run needs only the step.

#include <cstdint>

#include "ddp/optim/optim_config.h"

namespace ddp {

/// Linear warmup, then constant, step or cosine decay.
class LrSchedule {
 public:
  /// `total_steps`: the run's optimizer steps (cosine decays over those after warmup, unless
  /// schedule.decay_steps says over how many).
  LrSchedule(const ScheduleConfig& config, double base_lr, int64_t total_steps);

  /// The learning rate for optimizer step `step` (0-based).
  double lr_at(int64_t step) const;

 private:
  ScheduleConfig config_;
  double base_lr_;
  int64_t total_steps_;
};

}  // namespace ddp
