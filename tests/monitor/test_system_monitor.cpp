// The system monitor's judgement, fed every rank's numbers as the side values would bring them:
// its record, its log line, and the warnings for starved input and for a straggler.
#include <torch/torch.h>
#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <thread>

#include "ddp/monitor/system_monitor.h"
#include "support/subprocess.h"

namespace DDP_TEST_FILE {  // unity batches: Note [Test files] in tests/CMakeLists.txt

using Catch::Contains;
using ddp::test::count_occurrences;

namespace {

// What spdlog's default logger says while it lives.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> previous_;
};

// The summed side values of one step, in the monitor's slots: per rank (data wait ms, busy ms); CPU 50%, RSS 100 MiB.
void put_step_values(ddp::ValueSlots& side, ddp::SystemMonitor& monitor,
                     const std::vector<std::pair<double, double>>& per_rank) {
  const ddp::MonitorSlots& slots = monitor.slots();
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    side[slots.cpu_percent][r] = 50;
    side[slots.rss_mib][r] = 100;
    side[slots.data_wait_ms][r] = per_rank[r].first;
    side[slots.busy_ms][r] = per_rank[r].second;
  }
}

// Five steps of `per_rank`'s values, each `step_ms` long on rank 0 (0: not noted), then a record if due.
std::optional<ddp::MetricsRecord> window(ddp::ValueSlots& side, ddp::SystemMonitor& monitor,
                                         const std::vector<std::pair<double, double>>& per_rank, int64_t step,
                                         double step_ms = 0) {
  for (int i = 0; i < 5; ++i) {
    put_step_values(side, monitor, per_rank);
    monitor.take_summed();
    if (step_ms > 0) monitor.note_step_time(step_ms);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  return monitor.record_if_due(step);
}

double value_of(const ddp::MetricsRecord& record, const std::string& key) {
  for (const auto& [name, value] : record)
    if (name == key) return value;
  return -1;
}

}  // namespace

TEST_CASE("a straggler is found against the median of the others, at 1.2x and beyond", "[monitor]") {
  CHECK_FALSE(ddp::find_straggler({10}, 1.2));
  CHECK_FALSE(ddp::find_straggler({10, 11.9}, 1.2));
  CHECK(ddp::find_straggler({10, 12}, 1.2) == std::make_pair(1, 1.2));
  CHECK(ddp::find_straggler({10, 30, 11, 9}, 1.2) == std::make_pair(1, 3.0));
  CHECK_FALSE(ddp::find_straggler({0, 0}, 1.2));
}

TEST_CASE("the monitor records every rank, warns of starved input at once and of a straggler seen twice",
          "[monitor]") {
  CapturedLog log;
  ddp::MonitorConfig config;
  config.every_s = 0.01;
  ddp::ValueSlots side;
  side.reserve("stop vote");  // another participant's slot before the monitor's
  ddp::SystemMonitor monitor(config, /*rank=*/0, /*world_size=*/3, /*gpu_index=*/-1, side);
  REQUIRE(monitor.side_values() >= 12);

  auto even = window(side, monitor, {{0.1, 10}, {0.1, 10.5}, {0.1, 9.5}}, 10);
  REQUIRE(even);
  CHECK(value_of(*even, "sys_step_busy_ms_p50_rank1") == 10.5);
  CHECK(value_of(*even, "sys_rss_mib_rank2") == 100);
  CHECK(value_of(*even, "sys_cpu_percent_rank0") == 50);
  CHECK_THAT(log.text(), Contains("monitor at step 10: CPU 50% 50% 50% | RSS MiB 100 100 100 | data wait ms/step "
                                  "0.10 0.10 0.10 | compute ms/step 10.0 10.5 9.5 (by rank)"));
  CHECK_THAT(log.text(), !Contains("warning"));

  // Rank 0 waits 0.3 ms for data and computes 0.9 ms of a 32 ms step, the rest waiting for the
  // others' gradients: not starved.
  window(side, monitor, {{0.3, 0.9}, {0.1, 31}, {0.1, 31}}, 15, 32);
  CHECK_THAT(log.text(), !Contains("starved"));
  // Rank 2 waits 5 ms for data in a 15 ms step: a third of it.
  window(side, monitor, {{0.1, 10}, {0.1, 10}, {5, 10}}, 20, 15);
  CHECK_THAT(log.text(), Contains("starved input: rank 2 waits for data 33% of its step (5.0 of 15.0 ms)"));

  // Rank 1 computes twice as long: named in the second window in a row, not in the first.
  window(side, monitor, {{0.1, 10}, {0.1, 20}, {0.1, 10}}, 30);
  CHECK_THAT(log.text(), !Contains("straggler"));
  window(side, monitor, {{0.1, 10}, {0.1, 20}, {0.1, 10}}, 40);
  CHECK_THAT(log.text(), Contains("straggler: rank 1 computes 2.0x as long per step as the others (20.0 ms against "
                                  "10.0 ms)"));
  // Every window made a record; only the first said its line, monitor.log_every_s (60 s) not having passed since.
  CHECK_THAT(log.text(), !Contains("monitor at step 20") && !Contains("monitor at step 40"));
}

TEST_CASE("starved input is one line for all starved ranks, said again when they change or after monitor.log_every_s",
          "[monitor]") {
  for (double log_every_s : {60.0, 0.05}) {
    CapturedLog log;
    ddp::MonitorConfig config;
    config.every_s = 0.01;
    config.log_every_s = log_every_s;
    ddp::ValueSlots side;
    ddp::SystemMonitor monitor(config, /*rank=*/0, /*world_size=*/3, /*gpu_index=*/-1, side);
    INFO("monitor.log_every_s " << log_every_s);
    const std::string rank2 = "starved input: rank 2 waits for data 33% of its step (5.0 of 15.0 ms); raise";
    const std::string ranks02 = "starved input: rank 0 waits for data 50% of its step (10.0 of 20.0 ms); rank 2 "
                                "waits for data 33% of its step (5.0 of 15.0 ms); raise";
    for (int64_t step : {10, 20, 30}) window(side, monitor, {{0.1, 10}, {0.1, 10}, {5, 10}}, step);
    // Each window took at least 30 ms: the 60 s interval keeps the second and third quiet, 0.05 s not both.
    if (log_every_s > 1)
      CHECK(count_occurrences(log.text(), rank2) == 1);
    else
      CHECK(count_occurrences(log.text(), rank2) >= 2);
    window(side, monitor, {{10, 10}, {0.1, 10}, {5, 10}}, 40);  // rank 0 joins: said at once, in one line
    CHECK(count_occurrences(log.text(), ranks02) == 1);
    window(side, monitor, {{0.1, 10}, {0.1, 10}, {0.1, 10}}, 50);  // fed again
    const int said = count_occurrences(log.text(), "starved input");
    window(side, monitor, {{0.1, 10}, {0.1, 10}, {5, 10}}, 60);  // starved again: said again
    CHECK(count_occurrences(log.text(), "starved input") == said + 1);
  }
}

TEST_CASE("the monitor's log line comes every monitor.log_every_s, and never at 0, while every record is made",
          "[monitor]") {
  for (double log_every_s : {0.01, 0.0}) {
    CapturedLog log;
    ddp::MonitorConfig config;
    config.every_s = 0.01;
    config.log_every_s = log_every_s;
    ddp::ValueSlots side;
    ddp::SystemMonitor monitor(config, /*rank=*/0, /*world_size=*/2, /*gpu_index=*/-1, side);
    for (int64_t step : {10, 20, 30}) CHECK(window(side, monitor, {{0.1, 10}, {0.1, 10}}, step));
    INFO("monitor.log_every_s " << log_every_s << ": " << log.text());
    for (std::string step : {"10", "20", "30"})
      CHECK((log.text().find("monitor at step " + step + ":") != std::string::npos) == (log_every_s > 0));
  }
}

TEST_CASE("the monitor samples nothing before training starts: the setup (a data cache built) is no CPU reading",
          "[monitor]") {
  ddp::MonitorConfig config;
  config.every_s = 0.1;  // a sample every 0.05 s, once sampling runs
  ddp::ValueSlots side;
  ddp::SystemMonitor monitor(config, /*rank=*/0, /*world_size=*/1, /*gpu_index=*/-1, side);
  // The setup: a core busy for 0.5 s, ten sampling intervals.
  const auto busy_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  volatile uint64_t spins = 0;
  while (std::chrono::steady_clock::now() < busy_until) spins = spins + 1;
  monitor.put_local(/*data_wait_ms=*/5, /*busy_ms=*/1);
  monitor.take_summed();
  auto record = monitor.record_if_due(1);
  REQUIRE(record);
  // No sample yet, so no reading of the setup's CPU (sampling from construction read it as ~100%).
  CHECK(value_of(*record, "sys_cpu_percent_rank0") == 0);
  monitor.start();  // and stopped by the destructor
}

TEST_CASE("with the monitor off there are no side values, no thread and no records", "[monitor]") {
  ddp::MonitorConfig off;
  off.every_s = 0;
  ddp::ValueSlots side;
  ddp::SystemMonitor monitor(off, 0, 2, -1, side);
  CHECK(monitor.side_values() == 0);
  monitor.put_local(1, 2);
  CHECK(side.size() == 0);
  monitor.take_summed();
  CHECK_FALSE(monitor.record_if_due(5));
}

}  // namespace DDP_TEST_FILE
