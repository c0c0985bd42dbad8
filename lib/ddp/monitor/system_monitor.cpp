#include "ddp/monitor/system_monitor.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>


namespace ddp {

// Note [Monitor values]
// Every rank measures its own step: the time it waited for batches, and the time it was busy (the
// step less that wait and less the all-reduce time backward did not hide, which is waiting for the
// other ranks). Its sampling thread adds CPU use and RSS every monitor.every_s. These four numbers
// go into the rank's own slots of the side values the gradient reducer carries in its last bucket;
// the sum over ranks then holds every rank's numbers, on every rank, with no collective of its own.
// They describe the step before (a side value is set before the step's backward). A straggler is
// the rank that is busy longer than the others: they wait for it in the all-reduce, which does not
// count as busy, so it stands out however long everyone's steps look from outside.

namespace {

// CPU, RSS, data wait, busy; then, on CUDA builds, the GPU's five (-1: unknown): one slot each,
// with a place per rank. The same on every rank, since every rank runs the same binary.
#ifdef DDP_WITH_CUDA
constexpr int kValuesPerRank = 9;
#else
constexpr int kValuesPerRank = 4;
#endif
constexpr double kStarvedShare = 0.2;     // of a step spent waiting for data
constexpr double kStragglerRatio = 1.2;   // busy time against the others' median
constexpr int kStragglerWindows = 2;      // consistently: in this many windows in a row

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

double rss_mib() {
  long pages = 0, resident = 0;
  if (std::FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(statm);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  auto at = values.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(values.size() - 1) + 0.5);
  std::nth_element(values.begin(), at, values.end());
  return *at;
}

}  // namespace

std::optional<std::pair<int, double>> find_straggler(const std::vector<double>& busy_ms_per_rank, double ratio) {
  if (busy_ms_per_rank.size() < 2) return std::nullopt;
  auto slowest = std::max_element(busy_ms_per_rank.begin(), busy_ms_per_rank.end());
  std::vector<double> others;
  for (auto it = busy_ms_per_rank.begin(); it != busy_ms_per_rank.end(); ++it)
    if (it != slowest) others.push_back(*it);
  double typical = quantile(others, 0.5);
  if (typical <= 0 || *slowest < ratio * typical) return std::nullopt;
  return std::make_pair(static_cast<int>(slowest - busy_ms_per_rank.begin()), *slowest / typical);
}

SystemMonitor::SystemMonitor(const MonitorConfig& config, int rank, int world_size, int gpu_index,
                             ValueSlots& side_values, int process_ranks)
    : every_s_(config.every_s),
      log_every_s_(config.log_every_s),
      rank_(rank),
      process_share_(1.0 / std::max(1, process_ranks)),
      world_size_(world_size),
      side_values_(side_values),
      window_(world_size) {
  if (!enabled()) return;
  auto by_rank = [&](const char* name) {
    return side_values_.reserve(std::string("monitor ") + name, static_cast<std::size_t>(world_size_));
  };
  slots_.cpu_percent = by_rank("cpu_percent");
  slots_.rss_mib = by_rank("rss_mib");
  slots_.data_wait_ms = by_rank("data_wait_ms");
  slots_.busy_ms = by_rank("busy_ms");
  if (kValuesPerRank > 4) {
    slots_.gpu_utilization_percent = by_rank("gpu_utilization_percent");
    slots_.gpu_memory_used_mib = by_rank("gpu_memory_used_mib");
    slots_.gpu_memory_total_mib = by_rank("gpu_memory_total_mib");
    slots_.gpu_temperature_c = by_rank("gpu_temperature_c");
    slots_.gpu_power_w = by_rank("gpu_power_w");
  }
  rss_mib_ = rss_mib();
#ifdef DDP_WITH_CUDA
  if (gpu_index >= 0) gpu_ = GpuSampler::open_cuda_device(gpu_index);
#else
  (void)gpu_index;
#endif
}

void SystemMonitor::start() {
  if (!enabled() || thread_.joinable()) return;
  last_record_ = std::chrono::steady_clock::now();
  thread_ = std::thread([this] { sample_loop(); });
}

SystemMonitor::~SystemMonitor() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void SystemMonitor::sample_loop() {
  auto wall = std::chrono::steady_clock::now();
  double cpu = cpu_seconds();
  std::unique_lock<std::mutex> lock(mutex_);
  // The first sample comes soon, before the first record, so that a short run's has one.
  auto interval = std::chrono::duration<double>(std::min(every_s_ / 2, 0.5));
  while (!wake_.wait_for(lock, interval, [&] { return stopping_; })) {
    interval = std::chrono::duration<double>(every_s_);
    auto now = std::chrono::steady_clock::now();
    double cpu_now = cpu_seconds();
    double elapsed = std::chrono::duration<double>(now - wall).count();
    cpu_percent_ = elapsed > 0 ? 100.0 * (cpu_now - cpu) / elapsed : 0;
    rss_mib_ = rss_mib();
    if (gpu_) {
      auto reading = gpu_->sample();
      std::lock_guard<std::mutex> guard(gpu_mutex_);
      gpu_sample_ = reading;
    }
    wall = now;
    cpu = cpu_now;
  }
}

int SystemMonitor::side_values() const { return enabled() ? kValuesPerRank * world_size_ : 0; }

void SystemMonitor::put_local(double data_wait_ms, double busy_ms) {
  if (!enabled()) return;
  for (ValueSlots::Slot slot : slot_list()) {
    std::span<double> values = side_values_[slot];
    std::fill(values.begin(), values.end(), 0.0);  // the other ranks' places: they add their own
  }
  auto mine = [&](ValueSlots::Slot slot) -> double& { return side_values_[slot][static_cast<std::size_t>(rank_)]; };
  mine(slots_.cpu_percent) = cpu_percent_ * process_share_;
  mine(slots_.rss_mib) = rss_mib_ * process_share_;
  mine(slots_.data_wait_ms) = data_wait_ms;
  mine(slots_.busy_ms) = busy_ms;
  if (kValuesPerRank > 4) {
    std::optional<GpuSample> gpu;
    {
      std::lock_guard<std::mutex> guard(gpu_mutex_);
      gpu = gpu_sample_;
    }
    double unknown = -1;
    mine(slots_.gpu_utilization_percent) = gpu ? gpu->utilization_percent : unknown;
    mine(slots_.gpu_memory_used_mib) = gpu ? gpu->memory_used_mib : unknown;
    mine(slots_.gpu_memory_total_mib) = gpu ? gpu->memory_total_mib : unknown;
    mine(slots_.gpu_temperature_c) = gpu ? gpu->temperature_c : unknown;
    mine(slots_.gpu_power_w) = gpu ? gpu->power_w : unknown;
  }
}

void SystemMonitor::take_summed() {
  if (!enabled() || rank_ != 0) return;
  for (int r = 0; r < world_size_; ++r) {
    auto of = [&](ValueSlots::Slot slot) { return side_values_[slot][static_cast<std::size_t>(r)]; };
    RankSample sample{of(slots_.cpu_percent), of(slots_.rss_mib), of(slots_.data_wait_ms), of(slots_.busy_ms),
                      std::nullopt};
    if (kValuesPerRank > 4 && (of(slots_.gpu_utilization_percent) >= 0 || of(slots_.gpu_memory_used_mib) >= 0))
      sample.gpu = GpuSample{of(slots_.gpu_utilization_percent), of(slots_.gpu_memory_used_mib),
                             of(slots_.gpu_memory_total_mib), of(slots_.gpu_temperature_c), of(slots_.gpu_power_w)};
    window_[static_cast<std::size_t>(r)].push_back(sample);
  }
}

void SystemMonitor::note_step_time(double step_ms) {
  if (enabled() && rank_ == 0) step_ms_.push_back(step_ms);
}

std::vector<ValueSlots::Slot> SystemMonitor::slot_list() const {
  std::vector<ValueSlots::Slot> list{slots_.cpu_percent, slots_.rss_mib, slots_.data_wait_ms, slots_.busy_ms};
  if (kValuesPerRank > 4)
    list.insert(list.end(), {slots_.gpu_utilization_percent, slots_.gpu_memory_used_mib, slots_.gpu_memory_total_mib,
                             slots_.gpu_temperature_c, slots_.gpu_power_w});
  return list;
}

std::optional<MetricsRecord> SystemMonitor::record_if_due(int64_t step) {
  if (!enabled() || rank_ != 0 || window_[0].empty()) return std::nullopt;
  auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_record_).count() < every_s_) return std::nullopt;
  last_record_ = now;

  MetricsRecord record{{"step", static_cast<double>(step)}};
  std::string cpu_text, rss_text, wait_text, busy_text, gpu_text, starved_text;
  std::vector<double> busy_medians;
  std::vector<int> starved;
  const double step_p50 = quantile(step_ms_, 0.5);
  step_ms_.clear();
  for (int r = 0; r < world_size_; ++r) {
    auto& steps = window_[static_cast<std::size_t>(r)];
    std::vector<double> busy, wait;
    for (const auto& s : steps) {
      busy.push_back(s.busy_ms);
      wait.push_back(s.data_wait_ms);
    }
    const RankSample& last = steps.back();
    double wait_ms = quantile(wait, 0.5), busy_p50 = quantile(busy, 0.5);
    busy_medians.push_back(busy_p50);
    std::string suffix = "_rank" + std::to_string(r);
    record.emplace_back("sys_cpu_percent" + suffix, last.cpu_percent);
    record.emplace_back("sys_rss_mib" + suffix, last.rss_mib);
    record.emplace_back("sys_data_wait_ms" + suffix, wait_ms);
    record.emplace_back("sys_step_busy_ms_p10" + suffix, quantile(busy, 0.1));
    record.emplace_back("sys_step_busy_ms_p50" + suffix, busy_p50);
    record.emplace_back("sys_step_busy_ms_p90" + suffix, quantile(busy, 0.9));
    std::string sep = r ? " " : "";
    if (last.gpu) {
      const GpuSample& g = *last.gpu;
      for (const auto& [name, value] : {std::pair{"sys_gpu_util_percent", g.utilization_percent},
                                        std::pair{"sys_gpu_memory_used_mib", g.memory_used_mib},
                                        std::pair{"sys_gpu_memory_total_mib", g.memory_total_mib},
                                        std::pair{"sys_gpu_temperature_c", g.temperature_c},
                                        std::pair{"sys_gpu_power_w", g.power_w}})
        if (value >= 0) record.emplace_back(name + suffix, value);
      gpu_text += sep + fmt::format("{:.0f}% {:.0f}/{:.0f} MiB {:.0f}C {:.0f}W", last.gpu->utilization_percent,
                                    last.gpu->memory_used_mib, last.gpu->memory_total_mib, last.gpu->temperature_c,
                                    last.gpu->power_w);
    }
    cpu_text += sep + fmt::format("{:.0f}%", last.cpu_percent);
    rss_text += sep + fmt::format("{:.0f}", last.rss_mib);
    wait_text += sep + fmt::format("{:.2f}", wait_ms);
    busy_text += sep + fmt::format("{:.1f}", busy_p50);
    // Of the whole step, the wait for a slower rank's gradients included: a rank that waits 0.2 ms
    // for data and 30 ms for a straggler is not starved.
    const double step_ms = std::max(step_p50, wait_ms + busy_p50);
    if (wait_ms > kStarvedShare * step_ms) {
      starved.push_back(r);
      starved_text += fmt::format("{}rank {} waits for data {:.0f}% of its step ({:.1f} of {:.1f} ms)",
                                  starved_text.empty() ? "" : "; ", r, 100 * wait_ms / step_ms, wait_ms, step_ms);
    }
    steps.clear();
  }
  // One line for all starved ranks, said when the set of them changes and otherwise at most every
  // monitor.log_every_s, as the log line is: a run starved throughout would else repeat it every
  // monitor.every_s for every rank.
  if (starved.empty()) {
    last_starved_.clear();
  } else if (starved != last_starved_ ||
             (log_every_s_ > 0 && std::chrono::duration<double>(now - last_starved_said_).count() >= log_every_s_)) {
    spdlog::warn("starved input: {}; raise data.workers or data.prefetch", starved_text);
    last_starved_ = starved;
    last_starved_said_ = now;
  }
  if (log_every_s_ > 0 && (!last_log_ || std::chrono::duration<double>(now - *last_log_).count() >= log_every_s_)) {
    last_log_ = now;
    spdlog::info("monitor at step {}: CPU {} | RSS MiB {} | data wait ms/step {} | compute ms/step {}{} (by rank)",
                 step, cpu_text, rss_text, wait_text, busy_text, gpu_text.empty() ? "" : " | GPU " + gpu_text);
  }

  auto straggler = find_straggler(busy_medians, kStragglerRatio);
  slow_windows_ = straggler && straggler->first == last_straggler_ ? slow_windows_ + 1 : straggler ? 1 : 0;
  last_straggler_ = straggler ? straggler->first : -1;
  if (straggler && slow_windows_ % (6 * kStragglerWindows) == kStragglerWindows) {
    std::vector<double> others = busy_medians;
    others.erase(others.begin() + straggler->first);
    spdlog::warn("straggler: rank {} computes {:.1f}x as long per step as the others ({:.1f} ms against {:.1f} ms), "
                 "and every rank waits for it in the all-reduce",
                 straggler->first, straggler->second, busy_medians[static_cast<std::size_t>(straggler->first)],
                 quantile(others, 0.5));
  }
  return record;
}

}  // namespace ddp
