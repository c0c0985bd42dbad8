#include "ddp/loop/collective_counter.h"

#include <spdlog/spdlog.h>

namespace ddp {

void CollectiveCounter::step_begins() {
  if (!started_) return;
  if (steps_ < 0) {
    first_ = started_();
  } else {
    last_ = started_();
  }
  ++steps_;
}

void CollectiveCounter::report(bool log, MetricsRecord& record) const {
  if (steps_ < 1 || last_.size() != first_.size()) return;
  std::string text;
  for (std::size_t g = 0; g < last_.size(); ++g) {
    const double per_step = static_cast<double>(last_[g].second - first_[g].second) / static_cast<double>(steps_);
    text += fmt::format("{}{} {:.1f}", g ? ", " : "", last_[g].first, per_step);
    record.emplace_back("collectives_per_step_" + last_[g].first, per_step);
  }
  if (log && !text.empty()) spdlog::info("collectives a step on rank 0, by process group (between steps' starts): {}", text);
}

}  // namespace ddp
