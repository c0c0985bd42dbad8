#pragma once
// When a live report.html is worth rendering again. A render re-reads the whole run's metrics, so
// its cost grows with the run; rendering at every evaluation made a run with eval.every_steps=1 seven
// times slower (issue 22, item 15). The pacer keeps renders apart by a floor and by a multiple of
// what the last one cost, so the report's share of a run stays under 1 / kCostMultiple.

#include <chrono>

namespace ddp {

/// Decides whether a mid-run render of the report is due; the run's last render is always due.
class ReportPacer {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kMinInterval{10};
  static constexpr int kCostMultiple = 20;

  /// Whether a render at `now` is due: the first one is; later ones wait kMinInterval, or
  /// kCostMultiple times the last render's cost if that is longer.
  bool due(Clock::time_point now) const {
    if (!rendered_) return true;
    auto wait = std::max<Clock::duration>(kMinInterval, kCostMultiple * last_cost_);
    return now - last_end_ >= wait;
  }
  /// A render ran from `start` to `end`.
  void rendered(Clock::time_point start, Clock::time_point end) {
    rendered_ = true;
    last_cost_ = end - start;
    last_end_ = end;
  }

 private:
  bool rendered_ = false;
  Clock::duration last_cost_{};
  Clock::time_point last_end_;
};

}  // namespace ddp
