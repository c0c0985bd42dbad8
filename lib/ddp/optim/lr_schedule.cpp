#include "ddp/optim/lr_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ddp/common/error.h"

namespace ddp {

LrSchedule::LrSchedule(const ScheduleConfig& config, double base_lr, int64_t total_steps)
    : config_(config), base_lr_(base_lr), total_steps_(total_steps) {
  // The config's rule holds min_lr to optim.lr as given; optim.lr_scaling's lr is known here.
  if (config.name == "cosine" && config.min_lr > base_lr)
    throw ConfigError(
        fmt::format("schedule.min_lr: {} is above the lr the cosine decays from, {} (optim.lr scaled "
                    "by optim.lr_scaling): it would take the lr up instead",
                    config.min_lr, base_lr));
}

double LrSchedule::lr_at(int64_t step) const {
  if (step < config_.warmup_steps) return base_lr_ * static_cast<double>(step + 1) / config_.warmup_steps;
  int64_t after = step - config_.warmup_steps;
  if (config_.name == "step") return base_lr_ * std::pow(config_.gamma, static_cast<double>(after / config_.step_size));
  if (config_.name == "cosine") {
    const int64_t end = config_.decay_steps > 0 ? config_.decay_steps : total_steps_;
    int64_t span = std::max<int64_t>(1, end - config_.warmup_steps);
    double progress = std::min(1.0, static_cast<double>(after) / span);
    return config_.min_lr + (base_lr_ - config_.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return base_lr_;
}

}  // namespace ddp
