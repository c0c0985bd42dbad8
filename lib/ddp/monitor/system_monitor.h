#pragma once
// The system monitor: each rank's CPU use, memory, time waiting for data and time computing, seen
// by rank 0 every step at no cost of its own (the numbers travel with the gradients), recorded
// every monitor.every_s, with warnings for starved input and for a straggler.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ddp/common/value_slots.h"
#include "ddp/monitor/gpu_sampler.h"
#include "ddp/monitor/monitor_config.h"
#include "ddp/record/metrics_log.h"

namespace ddp {

/// One rank's numbers for one step (see Note [Monitor values]).
struct RankSample {
  double cpu_percent = 0;   ///< of one core, since the sampler's previous sample
  double rss_mib = 0;
  double data_wait_ms = 0;  ///< the step waited this long for its batches
  double busy_ms = 0;       ///< the step's time less the data wait and the all-reduce wait
  std::optional<GpuSample> gpu;  ///< CUDA builds, where NVML answers
};

/// The monitor's side values: one slot per number, with a place per rank.
struct MonitorSlots {
  ValueSlots::Slot cpu_percent, rss_mib, data_wait_ms, busy_ms;
  ValueSlots::Slot gpu_utilization_percent, gpu_memory_used_mib, gpu_memory_total_mib, gpu_temperature_c,
      gpu_power_w;  ///< CUDA builds
};

/// Every rank's numbers, and what rank 0 makes of them.
class SystemMonitor {
 public:
  /// Reserves its slot in `side_values` (which the gradient sync carries, and which must outlive
  /// it) unless the monitor is off; start() starts its sampling (CPU and RSS every config.every_s;
  /// on CUDA builds, CUDA device `gpu_index` through NVML unless it is -1). CPU and
  /// RSS are the process's: with `process_ranks` rank threads in it (Note [Ranks as threads]), each
  /// rank reports its share, so that they add up to the process's, not to that many times it.
  SystemMonitor(const MonitorConfig& config, int rank, int world_size, int gpu_index, ValueSlots& side_values,
                int process_ranks = 1);
  ~SystemMonitor();
  SystemMonitor(const SystemMonitor&) = delete;
  SystemMonitor& operator=(const SystemMonitor&) = delete;

  /// Training begins: this rank's sampling thread starts, and the first window with it. Not at
  /// construction: the setup (a data cache built by one rank, a model read) would be the first
  /// sample, and the first record would show it as one rank's CPU while all did the same steps.
  void start();

  bool enabled() const { return every_s_ > 0; }
  /// How many side values it reserved: 4 per rank (9 on CUDA builds), or none when off.
  int side_values() const;
  /// Its slots of the side values.
  const MonitorSlots& slots() const { return slots_; }

  /// Before a step's transfer: this rank's last step's numbers in its own places of the slot, zeros in the others'.
  void put_local(double data_wait_ms, double busy_ms);

  /// After it, rank 0: takes every rank's numbers from the summed slot.
  void take_summed();

  /// Rank 0: a step's wall time, the same for every rank (they meet in its collectives): what a
  /// rank's data wait is a share of, its wait for the others' gradients included.
  void note_step_time(double step_ms);

  /// Rank 0: when monitor.every_s has passed since the last one, a metrics record of the window
  /// (and its warnings, said here, and its log line when monitor.log_every_s has passed); else nullopt.
  std::optional<MetricsRecord> record_if_due(int64_t step);

 private:
  void sample_loop();
  std::vector<ValueSlots::Slot> slot_list() const;

  double every_s_;
  double log_every_s_;
  int rank_;
  double process_share_;  // of the process's CPU and RSS, this rank's: 1 / its rank threads
  int world_size_;
  ValueSlots& side_values_;
  MonitorSlots slots_;
  std::atomic<double> cpu_percent_{0};
  std::atomic<double> rss_mib_{0};
  std::unique_ptr<GpuSampler> gpu_;
  mutable std::mutex gpu_mutex_;
  std::optional<GpuSample> gpu_sample_;
  std::vector<std::vector<RankSample>> window_;  // rank 0: per rank, the steps since the last record
  std::vector<double> step_ms_;                   // rank 0: its steps' wall times since the last record
  std::chrono::steady_clock::time_point last_record_ = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> last_log_;  // none yet: the first record says its line
  std::vector<int> last_starved_;  // the starved ranks last said, while they stay starved
  std::chrono::steady_clock::time_point last_starved_said_;
  int slow_windows_ = 0;     // consecutive windows with the same straggler
  int last_straggler_ = -1;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

/// The rank whose median busy time is at least `ratio` × the median of the others' (nullopt if none),
/// with that factor.
std::optional<std::pair<int, double>> find_straggler(const std::vector<double>& busy_ms_per_rank, double ratio);

}  // namespace ddp
